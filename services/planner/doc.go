// Package planner turns repository events into plans and runs them over JetStream.
package planner
