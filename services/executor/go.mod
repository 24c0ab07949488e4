module github.com/proxops/proxops/services/executor

go 1.26

replace github.com/proxops/proxops => ../..
