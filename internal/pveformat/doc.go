// Package pveformat holds Proxmox VE's value formats, once for every part of ProxOps that reads or writes
// them: sizes (PVE::JSONSchema parse_size and format_size, exact to the byte), property strings
// (parse_property_string and print_property_string), tags (split_list and the stored tag form), the
// percent-encoding of the sshkeys value, node names, and the ownership tag. The adapter (internal/pve), the planner's
// wire translation (internal/pvewire) and the simulator (internal/pvesim) all use it. It is pure: strings
// in, values out.
package pveformat
