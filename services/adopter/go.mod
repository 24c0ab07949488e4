module github.com/proxops/proxops/services/adopter

go 1.26

replace github.com/proxops/proxops => ../..
