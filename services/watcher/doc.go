// Package watcher turns git pushes (webhooks), polls and a drift schedule into repository events.
package watcher
