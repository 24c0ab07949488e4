package watcher

// OpenFilesBelow lists the files below a directory this process holds open.
var OpenFilesBelow = openFilesBelow
