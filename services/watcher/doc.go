// Package watcher follows one git repository and announces its manifest trees to the rest of ProxOps.
//
// It is the only part of ProxOps that touches git. It notices a new commit of one branch by polling a cheap
// remote ref listing, by a verified push webhook (GitHub, Gitea/Forgejo, GitLab), by an explicit
// ReconcileRequest, and re-announces the current commit on a drift schedule. For each new commit it reads the
// manifest files of the commit's tree, stores them once under the git tree hash in a TreeStore and publishes a
// RepoChanged event whose id makes one commit one plan however it was noticed.
//
// Remote repositories are fetched into the watcher's own bare mirror under its data directory (force-pushes
// are followed); a local repository is read in place from its committed objects, and its work tree is never
// read or written. The bus (tree store, event publisher, key-value store and request source) is reached
// through the small interfaces in deps.go.
package watcher
