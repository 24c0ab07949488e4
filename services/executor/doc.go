// Package executor applies operations against the PVE API of one node and serves its inventory.
package executor
