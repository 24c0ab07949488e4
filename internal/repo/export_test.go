package repo

// SetResourceCap lowers the repository's manifest cap until the returned function restores it.
func SetResourceCap(n int) (restore func()) {
	old := resourceCap
	resourceCap = n
	return func() { resourceCap = old }
}
