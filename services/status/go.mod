module github.com/proxops/proxops/services/status

go 1.26

replace github.com/proxops/proxops => ../..
