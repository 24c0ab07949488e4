package pvesim

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/proxops/proxops/internal/pvesim/schema"
)

// Sim is a simulated Proxmox VE cluster serving /api2/json. It is safe for concurrent use: all state sits
// behind one mutex, and tasks run in goroutines.
type Sim struct {
	mu sync.Mutex

	api      *schema.Schema
	routes   []apiRoute
	qemuDesc *confDesc
	lxcDesc  *confDesc

	version     string
	clusterName string
	nodes       []*node
	storages    []*storage
	bridges     map[string]bool
	tokens      map[string]string // token id → secret
	users       map[string]string // user@realm → password
	guests      map[int]*guest
	volumes     map[string]*volume // volumeKey → volume
	// used is the sum of the sizes of the volumes in volumes, by storage and node ("" on shared storage),
	// kept as volumes are put and removed: summing every volume on each allocation grew with the guests.
	used       map[volumeUse]int64
	tasks      map[string]*task
	taskOrder  []*task
	durations  map[string]time.Duration
	authDelay  time.Duration
	macPrefix  string
	tagStyle   map[string]string // datacenter.cfg tag-style
	datacenter map[string]any    // other datacenter.cfg options GET /cluster/options reports
	rng        *mrand.Rand
	seed       uint64              // the spec's seed, or a random one
	idRNG      map[int]*mrand.Rand // per guest: see idStream
	ticketKey  []byte
	nextPID    int
	bootTime   time.Time

	hooks     []Hook
	taskHooks []TaskHook
	log       []RequestLogEntry
	counters  map[string]int
	warnings  []string
	taskWG    sync.WaitGroup
	taskSeq   uint64

	flocks       map[string]int // lock file → -1 exclusive, n>0 shared holders
	flockWake    chan struct{}  // closed and replaced whenever a flock is released
	lockTimeouts map[string]time.Duration
	resourcesLag time.Duration
	haDelay      time.Duration
	shutdownWait time.Duration
	clock        time.Time // Spec.Clock; zero: the current time
	pools        map[string]*pool
	// firewallCluster is cluster.fw, firewallGuests each guest's <vmid>.fw (firewall.go).
	firewallCluster *fwConf
	firewallGuests  map[int]*fwConf
	mirrors         map[string]string
	backupJobs      map[string]map[string]string // jobs.cfg vzdump entries: id → options
	ha              haConfig

	faults faultState
	gate   gate // the API daemon's worker limit
}

type node struct {
	name    string
	offline bool
	cpus    int
	memory  int64
}

type storage struct {
	id       string
	path     string // directory of a file-based storage
	typ      string
	content  map[string]bool
	shared   bool
	nodes    map[string]bool // empty: all
	total    int64
	disabled bool
}

func (s *storage) onNode(n string) bool { return len(s.nodes) == 0 || s.nodes[n] }

// fileBased reports whether the storage type keeps files in directories (dir, nfs, cifs, btrfs, cephfs).
func (s *storage) fileBased() bool {
	switch s.typ {
	case "dir", "nfs", "cifs", "btrfs", "cephfs", "glusterfs":
		return true
	}
	return false
}

func (s *storage) contentList() string {
	var c []string
	for k := range s.content {
		c = append(c, k)
	}
	sort.Strings(c)
	return strings.Join(c, ",")
}

// volume is one volume on a storage.
type volume struct {
	volid   string
	storage string
	node    string // "" on shared storage
	content string // images, rootdir, iso, vztmpl, import, backup, snippets
	format  string
	size    int64
	vmid    int
	ctime   int64
	// virtualSize is a disk image's virtual size when it differs from its file size (qcow2 header).
	virtualSize int64
	// data or path hold the content of iso/vztmpl/import files; with neither the content is synthetic.
	data []byte
	path string
	// parent is the base volume a linked clone is backed by.
	parent string
}

type guest struct {
	vmid       int
	kind       string // qemu or lxc
	node       string
	file       *configFile
	raw        string
	running    bool
	qmpstatus  string
	startedAt  time.Time
	createdAt  time.Time // for the /cluster/resources lag
	ha         bool      // an HA resource (vm:<id> / ct:<id>)
	haState    string    // requested HA state: started or stopped
	ignoreACPI bool
	pool       string
	// ciSeen are the cloud-init keys of a VM at its last write, to record what a write changes.
	ciSeen map[string]string
	// ciDrive says the current config had a cloud-init drive at the last write.
	ciDrive bool
}

func (g *guest) typeWord() string {
	if g.kind == "lxc" {
		return "CT"
	}
	return "VM"
}

func (g *guest) confPath() string {
	if g.kind == "lxc" {
		return fmt.Sprintf("nodes/%s/lxc/%d.conf", g.node, g.vmid)
	}
	return fmt.Sprintf("nodes/%s/qemu-server/%d.conf", g.node, g.vmid)
}

// write re-renders the config file text (and so the digest) from the parsed config.
func (g *guest) write() {
	g.recordCloudInit()
	g.raw = renderConfigFile(g.kind, g.file)
}

func (g *guest) digest() string { return sha1Hex(g.raw) }

func (g *guest) conf() map[string]string { return g.file.current.conf }

// New builds a simulator from a spec. It fails on an inconsistent spec (duplicate vmids, unknown nodes or
// storages, unparsable tokens).
func New(spec Spec) (*Sim, error) {
	api, err := schema.Load()
	if err != nil {
		return nil, err
	}
	s := &Sim{
		api:          api,
		routes:       apiRoutes(api.Paths()),
		version:      spec.Version,
		clusterName:  spec.ClusterName,
		bridges:      map[string]bool{},
		tokens:       map[string]string{},
		users:        map[string]string{},
		guests:       map[int]*guest{},
		volumes:      map[string]*volume{},
		used:         map[volumeUse]int64{},
		tasks:        map[string]*task{},
		durations:    map[string]time.Duration{},
		authDelay:    time.Duration(spec.AuthFailureDelay),
		macPrefix:    spec.MACPrefix,
		datacenter:   map[string]any{},
		counters:     map[string]int{},
		nextPID:      0x1000,
		bootTime:     time.Now(),
		flocks:       map[string]int{},
		flockWake:    make(chan struct{}),
		lockTimeouts: map[string]time.Duration{},
		resourcesLag: time.Duration(spec.ResourcesLag),
		haDelay:      50 * time.Millisecond,
		shutdownWait: time.Duration(spec.ShutdownWait),
		pools:        map[string]*pool{},
		mirrors:      map[string]string{},
		backupJobs:   map[string]map[string]string{},
		ha:           newHAConfig(),
		clock:        spec.Clock,
	}
	if err := s.applySettings(spec); err != nil {
		return nil, err
	}
	if err := s.addNodes(spec.Nodes); err != nil {
		return nil, err
	}
	if err := s.addContent(spec); err != nil {
		return nil, err
	}
	if err := s.SetFaults(spec.Faults); err != nil {
		return nil, fmt.Errorf("spec: faults: %w", err)
	}
	return s, nil
}

// applySettings takes the spec's behaviour settings, each with PVE's or the simulator's default: lock
// timeouts, HA delay, pools and mirrors, release, cluster name, MAC prefix, tag style, the random seed (and
// what derives from it) and task durations.
func (s *Sim) applySettings(spec Spec) error {
	for k, v := range defaultLockTimeouts {
		s.lockTimeouts[k] = v
	}
	for k, v := range spec.LockTimeouts {
		s.lockTimeouts[k] = time.Duration(v)
	}
	if spec.HADelay != 0 {
		s.haDelay = time.Duration(spec.HADelay)
	}
	for _, p := range spec.Pools {
		if err := s.addSpecPool(p); err != nil {
			return fmt.Errorf("spec: %w", err)
		}
	}
	for u, p := range spec.Mirrors {
		s.mirrors[u] = p
	}
	s.gate.cond = sync.NewCond(&s.gate.mu)
	if s.version == "" {
		s.version = "9.1.1"
	}
	if s.clusterName == "" {
		s.clusterName = "sim"
	}
	if s.macPrefix == "" {
		s.macPrefix = "BC:24:11"
	}
	if spec.MACPrefix != "" {
		s.datacenter["mac_prefix"] = spec.MACPrefix
	}
	if spec.TagStyle != "" {
		ts, err := parseTagStyle(spec.TagStyle)
		if err != nil {
			return fmt.Errorf("spec: tagStyle: %w", err)
		}
		s.tagStyle = ts
	}
	seed := uint64(spec.Seed)
	if seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:])
	}
	s.rng = mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s.seed, s.idRNG = seed, map[int]*mrand.Rand{}
	s.ticketKey = make([]byte, 32)
	for i := range s.ticketKey {
		s.ticketKey[i] = byte(s.rng.Uint32())
	}
	s.qemuDesc = s.configDesc("qemu")
	s.lxcDesc = s.configDesc("lxc")
	for k, v := range spec.TaskDurations {
		s.durations[k] = time.Duration(v)
	}
	if _, ok := s.durations["default"]; !ok {
		s.durations["default"] = 20 * time.Millisecond
	}
	return nil
}

// addNodes adds the spec's nodes (at least one, with valid, distinct names), 16 CPUs and 64 GiB unless given.
func (s *Sim) addNodes(nodes []NodeSpec) error {
	if len(nodes) == 0 {
		return errors.New("spec: at least one node is required")
	}
	seen := map[string]bool{}
	for _, n := range nodes {
		if !reNode.MatchString(n.Name) || seen[n.Name] {
			return fmt.Errorf("spec: node %q: invalid or duplicate name", n.Name)
		}
		seen[n.Name] = true
		nd := &node{name: n.Name, offline: n.Offline, cpus: n.CPUs, memory: n.MemoryBytes}
		if nd.cpus == 0 {
			nd.cpus = 16
		}
		if nd.memory == 0 {
			nd.memory = 64 << 30
		}
		s.nodes = append(s.nodes, nd)
	}
	return nil
}

// addContent adds what the spec puts on the cluster: storages, bridges (vmbr0 unless given), API tokens and
// users, files and guests.
func (s *Sim) addContent(spec Spec) error {
	for _, st := range spec.Storages {
		if err := s.addStorage(st); err != nil {
			return err
		}
	}
	bridges := spec.Bridges
	if len(bridges) == 0 {
		bridges = []string{"vmbr0"}
	}
	for _, b := range bridges {
		s.bridges[b] = true
	}
	for _, t := range spec.Tokens {
		if !reTokenID.MatchString(t.ID) || t.Secret == "" {
			return fmt.Errorf("spec: token %q: want user@realm!name and a secret", t.ID)
		}
		s.tokens[t.ID] = t.Secret
	}
	for _, u := range spec.Users {
		if !reUserID.MatchString(u.Name) {
			return fmt.Errorf("spec: user %q: want user@realm", u.Name)
		}
		s.users[u.Name] = u.Password
	}
	for _, f := range spec.Files {
		if err := s.addFile(f); err != nil {
			return err
		}
	}
	for _, g := range spec.Guests {
		if err := s.addGuest(g); err != nil {
			return err
		}
	}
	return nil
}

var (
	reTokenID = regexp.MustCompile(`^([^\s:/@!]+@[A-Za-z][A-Za-z0-9.\-_]+)!([A-Za-z][A-Za-z0-9.\-_]+)$`)
	reUserID  = regexp.MustCompile(`^[^\s:/@!]+@[A-Za-z][A-Za-z0-9.\-_]+$`)
)

// configDesc derives the config keys of a guest type from the PUT config schema (every config key)
// minus the update-only parameters.
func (s *Sim) configDesc(kind string) *confDesc {
	m := s.api.Method("/nodes/{node}/"+kind+"/{vmid}/config", "PUT")
	props := map[string]*schema.Prop{}
	for k, p := range m.Parameters.Properties {
		switch k {
		case "node", "vmid", "delete", "revert", "digest", "force", "skiplock", "background_delay":
			continue
		}
		props[k] = p
	}
	return &confDesc{kind: kind, props: props}
}

func (s *Sim) desc(kind string) *confDesc {
	if kind == "lxc" {
		return s.lxcDesc
	}
	return s.qemuDesc
}

func (s *Sim) addStorage(st StorageSpec) error {
	if !reID.MatchString(st.ID) {
		return fmt.Errorf("spec: storage %q: invalid id", st.ID)
	}
	allowed, ok := storageTypeContent[st.Type]
	if !ok {
		return fmt.Errorf("spec: storage %s: unknown type %q", st.ID, st.Type)
	}
	sto := &storage{id: st.ID, typ: st.Type, content: map[string]bool{}, shared: st.Shared, nodes: map[string]bool{},
		total: st.TotalBytes, disabled: st.Disabled, path: st.Path}
	if sto.path == "" {
		switch {
		case st.ID == "local":
			sto.path = "/var/lib/vz"
		case st.Type == "nfs" || st.Type == "cifs" || st.Type == "cephfs" || st.Type == "glusterfs":
			sto.path = "/mnt/pve/" + st.ID
		default:
			sto.path = "/mnt/" + st.ID
		}
	}
	if sto.total == 0 {
		sto.total = 1 << 40
	}
	if st.Type == "rbd" || st.Type == "cephfs" || st.Type == "nfs" || st.Type == "cifs" {
		sto.shared = true
	}
	for _, c := range st.Content {
		if !allowed[c] {
			// pve-storage Plugin.pm check_config: "storage does not support content type '$c'"
			return fmt.Errorf("spec: storage %s: type %s does not support content type '%s'", st.ID, st.Type, c)
		}
		sto.content[c] = true
	}
	for _, n := range st.Nodes {
		if s.node(n) == nil {
			return fmt.Errorf("spec: storage %s: unknown node %q", st.ID, n)
		}
		sto.nodes[n] = true
	}
	for _, o := range s.storages {
		if o.id == st.ID {
			return fmt.Errorf("spec: duplicate storage %q", st.ID)
		}
	}
	s.storages = append(s.storages, sto)
	return nil
}

// storageTypeContent is which content types each storage type allows (pve-storage Plugin.pm plugindata).
var storageTypeContent = map[string]map[string]bool{
	"dir":       set("images", "rootdir", "vztmpl", "iso", "backup", "snippets", "import", "none"),
	"nfs":       set("images", "rootdir", "vztmpl", "iso", "backup", "snippets", "import", "none"),
	"cifs":      set("images", "rootdir", "vztmpl", "iso", "backup", "snippets", "import", "none"),
	"btrfs":     set("images", "rootdir", "vztmpl", "iso", "backup", "snippets", "import", "none"),
	"cephfs":    set("vztmpl", "iso", "backup", "snippets", "import"),
	"glusterfs": set("images", "vztmpl", "iso", "backup", "snippets"),
	"lvm":       set("images", "rootdir", "none"),
	"lvmthin":   set("images", "rootdir", "none"),
	"zfspool":   set("images", "rootdir"),
	"rbd":       set("images", "rootdir"),
	"iscsi":     set("images", "none"),
	"zfs":       set("images"),
}

func set(xs ...string) map[string]bool {
	m := map[string]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}

func (s *Sim) node(name string) *node {
	for _, n := range s.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

func (s *Sim) storage(id string) *storage {
	for _, st := range s.storages {
		if st.id == id {
			return st
		}
	}
	return nil
}

func volumeKey(node, volid string) string { return node + "|" + volid }

// lookupVolume finds a volume as seen from a node.
func (s *Sim) lookupVolume(nodeName, volid string) *volume {
	if v, ok := s.volumes[volumeKey("", volid)]; ok {
		return v
	}
	if v, ok := s.volumes[volumeKey(nodeName, volid)]; ok {
		return v
	}
	return nil
}

// volumeUse is where a volume's size counts: its storage, and its node ("" on shared storage).
type volumeUse struct{ storage, node string }

func (s *Sim) putVolume(v *volume) {
	if v.ctime == 0 {
		v.ctime = s.stampUnix()
	}
	key := volumeKey(v.node, v.volid)
	s.removeVolumeKey(key)
	s.volumes[key] = v
	s.used[volumeUse{v.storage, v.node}] += v.size
}

func (s *Sim) deleteVolume(nodeName, volid string) {
	s.removeVolumeKey(volumeKey("", volid))
	s.removeVolumeKey(volumeKey(nodeName, volid))
}

// resizeVolume gives a stored volume a new size (its virtual size is then the same).
func (s *Sim) resizeVolume(v *volume, size int64) {
	s.used[volumeUse{v.storage, v.node}] += size - v.size
	v.size, v.virtualSize = size, 0
}

// removeVolumeKey removes the volume stored under a volumeKey, if any. Volumes leave s.volumes only
// through here, so s.used stays their sum.
func (s *Sim) removeVolumeKey(key string) {
	v, ok := s.volumes[key]
	if !ok {
		return
	}
	delete(s.volumes, key)
	u := volumeUse{v.storage, v.node}
	if s.used[u] -= v.size; s.used[u] == 0 {
		delete(s.used, u)
	}
}

func (s *Sim) addFile(f FileSpec) error {
	sid, volname, ok := splitVolID(f.VolID)
	if !ok {
		return fmt.Errorf("spec: file %q: not a volume id", f.VolID)
	}
	st := s.storage(sid)
	if st == nil {
		return fmt.Errorf("spec: file %s: unknown storage %q", f.VolID, sid)
	}
	content, format, vmid, err := classifyVolname(st, volname)
	if err != nil {
		return fmt.Errorf("spec: file %s: %w", f.VolID, err)
	}
	if !st.content[content] {
		return fmt.Errorf("spec: file %s: storage '%s' does not support content-type '%s'", f.VolID, sid, content)
	}
	nodes := []string{""}
	if !st.shared {
		nodes = nil
		if f.Node != "" {
			if s.node(f.Node) == nil || !st.onNode(f.Node) {
				return fmt.Errorf("spec: file %s: storage %s is not on node %q", f.VolID, sid, f.Node)
			}
			nodes = []string{f.Node}
		} else {
			for _, n := range s.nodes {
				if st.onNode(n.name) {
					nodes = append(nodes, n.name)
				}
			}
		}
	}
	size := f.Size
	if f.Path != "" {
		fi, err := os.Stat(f.Path)
		if err != nil {
			return fmt.Errorf("spec: file %s: %w", f.VolID, err)
		}
		size = fi.Size()
	}
	for _, n := range nodes {
		v := &volume{volid: f.VolID, storage: sid, node: n, content: content, format: format, size: size, vmid: vmid, path: f.Path}
		if f.Path != "" && (format == "qcow2" || format == "vmdk") {
			if vs, ok := imageVirtualSize(readHead(f.Path)); ok {
				v.virtualSize = vs
			}
		}
		s.putVolume(v)
	}
	return nil
}

func splitVolID(volid string) (string, string, bool) {
	m := reVolumeID.FindStringSubmatch(volid)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

var (
	reISOName    = regexp.MustCompile(`(?i)^iso/([^/]+\.(?:iso|img))$`)
	reVztmplName = regexp.MustCompile(`(?i)^vztmpl/([^/]+\.(tar|tar\.(gz|xz|zst|bz2)))$`)
	reImportName = regexp.MustCompile(`^import/([^/]+\.(ova|ovf|qcow2|raw|vmdk))$`)
	reBackupName = regexp.MustCompile(`^backup/([^/]+)$`)
	reSnippet    = regexp.MustCompile(`^snippets/([^/]+)$`)
	reImageDir   = regexp.MustCompile(`^(\d+)/((?:base|vm|subvol)-(\d+)-[^/]+?)(\.(raw|qcow2|vmdk|subvol))?$`)
	reImageBlock = regexp.MustCompile(`^((?:base|vm)-(\d+)-[^/]+?)(\.(raw|qcow2|vmdk))?$`)
	reLinkedDir  = regexp.MustCompile(`^(\d+)/base-\d+-[^/]+/(\d+)/(vm|base)-(\d+)-[^/]+$`)
)

// classifyVolname is a simplified pve-storage parse_volname: content type, format and owner of a volume.
func classifyVolname(st *storage, volname string) (content, format string, vmid int, err error) {
	switch {
	case reISOName.MatchString(volname):
		return "iso", "iso", 0, nil
	case reVztmplName.MatchString(volname):
		m := reVztmplName.FindStringSubmatch(volname)
		ext := strings.ToLower(m[2])
		if ext == "tar" {
			return "vztmpl", "tar", 0, nil
		}
		return "vztmpl", "t" + strings.TrimPrefix(ext, "tar."), 0, nil
	case reImportName.MatchString(volname):
		return "import", reImportName.FindStringSubmatch(volname)[2], 0, nil
	case reBackupName.MatchString(volname):
		return "backup", "vma", 0, nil
	case reSnippet.MatchString(volname):
		return "snippets", "snippet", 0, nil
	case reLinkedDir.MatchString(volname):
		m := reLinkedDir.FindStringSubmatch(volname)
		id, _ := strconv.Atoi(m[2])
		return "images", formatFromName(volname), id, nil
	case reImageDir.MatchString(volname):
		m := reImageDir.FindStringSubmatch(volname)
		return imageVolume(m[2], m[1], m[5])
	case reImageBlock.MatchString(volname):
		m := reImageBlock.FindStringSubmatch(volname)
		return imageVolume(m[1], m[2], m[4])
	}
	return "", "", 0, fmt.Errorf("unable to parse volume name '%s'", volname)
}

// imageVolume is the content, format (raw when the name has no suffix) and vmid of the image volume name,
// as parse_volname reads them.
func imageVolume(name, vmid, format string) (string, string, int, error) {
	id, _ := strconv.Atoi(vmid)
	if format == "" {
		format = "raw"
	}
	return imageContent(name), format, id, nil
}

func imageContent(name string) string {
	if strings.HasPrefix(name, "subvol-") {
		return "rootdir"
	}
	return "images"
}

func formatFromName(n string) string {
	switch {
	case strings.HasSuffix(n, ".qcow2"):
		return "qcow2"
	case strings.HasSuffix(n, ".vmdk"):
		return "vmdk"
	}
	return "raw"
}

// addGuest loads a seeded guest from its raw config text.
func (s *Sim) addGuest(gs GuestSpec) error {
	if gs.Type != "qemu" && gs.Type != "lxc" {
		return fmt.Errorf("spec: guest %d: type must be qemu or lxc, not %q", gs.VMID, gs.Type)
	}
	if gs.VMID < 100 || gs.VMID > 999999999 {
		return fmt.Errorf("spec: guest %d: vmid out of range", gs.VMID)
	}
	if s.node(gs.Node) == nil {
		return fmt.Errorf("spec: guest %d: unknown node %q", gs.VMID, gs.Node)
	}
	if o, ok := s.guests[gs.VMID]; ok {
		return fmt.Errorf("spec: guest %d: %s %d already exists on node '%s'", gs.VMID, o.typeWord(), gs.VMID, o.node)
	}
	cf, warnings := parseConfigFile(s.desc(gs.Type), gs.VMID, gs.Config)
	s.warnings = append(s.warnings, warnings...)
	g := &guest{vmid: gs.VMID, kind: gs.Type, node: gs.Node, file: cf, raw: gs.Config, ignoreACPI: gs.IgnoreACPI}
	if gs.Running {
		g.running, g.qmpstatus, g.startedAt = true, "running", time.Now()
	}
	if g.kind == "qemu" {
		g.ciSeen, g.ciDrive = cloudInitKeys(g.conf()), cloudinitDrive(g.conf()) != ""
	}
	s.guests[gs.VMID] = g
	s.setHAManaged(g, gs.HA)
	s.registerGuestVolumes(g)
	return nil
}

// registerGuestVolumes records the volumes a seeded config references on known storages, so storage
// listings show them.
func (s *Sim) registerGuestVolumes(g *guest) {
	for _, k := range slices.Sorted(maps.Keys(g.conf())) {
		volid, size, ok := s.volumeOfKey(g.kind, k, g.conf()[k])
		if !ok {
			continue
		}
		sid, volname, ok := splitVolID(volid)
		if !ok {
			continue
		}
		st := s.storage(sid)
		if st == nil || s.lookupVolume(g.node, volid) != nil {
			continue
		}
		content, format, vmid, err := classifyVolname(st, volname)
		if err != nil || (content != "images" && content != "rootdir") {
			continue
		}
		nodeName := g.node
		if st.shared {
			nodeName = ""
		}
		s.putVolume(&volume{volid: volid, storage: sid, node: nodeName, content: content, format: format, size: size, vmid: vmid})
	}
}

// volumeOfKey returns the volume id and size of a disk-like config key.
func (s *Sim) volumeOfKey(kind, key, val string) (string, int64, bool) {
	p := s.desc(kind).prop(key)
	if p == nil || p.FormatObject == nil {
		if strings.HasPrefix(key, "unused") {
			return val, 0, true
		}
		return "", 0, false
	}
	var fileKey string
	switch {
	case kind == "qemu" && isDrive(key):
		fileKey = "file"
	case kind == "lxc" && (key == "rootfs" || strings.HasPrefix(key, "mp")):
		fileKey = "volume"
	case strings.HasPrefix(key, "unused"):
		fileKey = map[string]string{"qemu": "file", "lxc": "volume"}[kind]
	default:
		return "", 0, false
	}
	d, err := parsePropertyString(p.FormatObject, val, key)
	if err != nil {
		return "", 0, false
	}
	if d["media"] == "cdrom" {
		return "", 0, false
	}
	size, _ := parseSize(d["size"])
	return d[fileKey], size, d[fileKey] != ""
}

// bytesReader avoids importing bytes in spec.go.
func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
