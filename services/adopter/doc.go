// Package adopter turns live guests into manifests and reports unmodelled PVE keys as gaps.
package adopter
