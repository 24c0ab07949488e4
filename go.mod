module github.com/proxops/proxops

go 1.26

require (
	github.com/google/go-cmp v0.7.0
	github.com/spf13/cobra v1.10.2
	go.yaml.in/yaml/v3 v3.0.6
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/buger/goterm v1.0.4 // indirect
	github.com/diskfs/go-diskfs v1.9.3 // indirect
	github.com/djherbis/times v1.6.0 // indirect
	github.com/gorilla/websocket v1.4.2 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/jinzhu/copier v0.3.4 // indirect
	github.com/luthermonson/go-proxmox v0.9.0 // indirect
	github.com/magefile/mage v1.14.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	golang.org/x/sys v0.43.0 // indirect
)

tool google.golang.org/protobuf/cmd/protoc-gen-go
