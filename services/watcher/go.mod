module github.com/proxops/proxops/services/watcher

go 1.26

replace github.com/proxops/proxops => ../..
