package pvewire

// OwnedCloudInitKeys lists the cloud-init keys a VM's manifest declares (ciuser, sshkeys, cipassword,
// nameserver, searchdomain, ipconfigN), in the order the config writes them; nil for a container or a VM
// without cloud-init data.
func OwnedCloudInitKeys(g Desired) ([]string, error) {
	if g.Resource == nil || !g.Resource.Kind.IsQEMU() {
		return nil, nil
	}
	s, err := g.vm()
	if err != nil {
		return nil, err
	}
	c := s.CloudInitData
	if c == nil {
		return nil, nil
	}
	var keys []string
	if c.CIUser != "" {
		keys = append(keys, "ciuser")
	}
	if sshKeysOwned(c) {
		keys = append(keys, "sshkeys")
	}
	if c.CIPasswordRef != "" {
		keys = append(keys, "cipassword")
	}
	if len(c.Nameservers) > 0 {
		keys = append(keys, "nameserver")
	}
	if len(c.SearchDomains) > 0 {
		keys = append(keys, "searchdomain")
	}
	for _, ip := range ipconfigs(c) {
		keys = append(keys, "ipconfig"+itoa(ip.NIC))
	}
	return keys, nil
}
