module github.com/proxops/proxops/services/planner

go 1.26

replace github.com/proxops/proxops => ../..
