package bus

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Permissions are the subjects a NATS user may publish to and subscribe to. Anything not allowed is
// denied; a denied JetStream API call shows up to the client as a timeout.
type Permissions struct {
	Publish   []string
	Subscribe []string
	// AllowResponses lets the user reply to the requests it receives (one reply per request, within
	// ResponseTTL), without a publish permission on the requesters' inboxes.
	AllowResponses bool
}

// ResponseTTL is how long a user with AllowResponses may answer a request.
const ResponseTTL = 5 * time.Minute

func (p Permissions) server() *server.Permissions {
	sp := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: slices.Clone(p.Publish)},
		Subscribe: &server.SubjectPermission{Allow: slices.Clone(p.Subscribe)},
	}
	if p.AllowResponses {
		sp.Response = &server.ResponsePermission{MaxMsgs: 1, Expires: ResponseTTL}
	}
	return sp
}

// InboxPrefix is the reply-subject prefix of a user: each user may subscribe to its own inboxes only, so no
// service can read the replies meant for another.
func InboxPrefix(user string) string { return "_INBOX." + user }

// Role is a ProxOps service as NATS sees it.
type Role string

const (
	RoleWatcher  Role = "watcher"
	RolePlanner  Role = "planner"
	RoleExecutor Role = "executor"
	RoleAdopter  Role = "adopter"
	RoleStatus   Role = "status"
	RoleCLI      Role = "cli"
	RoleNotifier Role = "notifier"
	// RoleOperator is a person's tool with the privilege to apply a work tree (and suspend clusters).
	RoleOperator Role = "operator"
	// RoleAdmin provisions the streams, buckets and object stores (proxops provision) and nothing else.
	RoleAdmin Role = "admin"
)

// permSet accumulates allow lists.
type permSet struct {
	pub, sub  []string
	responses bool
}

func (s *permSet) publish(subjects ...string)   { s.pub = append(s.pub, subjects...) }
func (s *permSet) subscribe(subjects ...string) { s.sub = append(s.sub, subjects...) }

// inbox: replies to the user's own requests, JetStream API calls and pulls.
func (s *permSet) inbox(user string) { s.subscribe(InboxPrefix(user) + ".>") }

// consume: one durable pull consumer, which the user may create (with exactly this filter), inspect, pull
// from and acknowledge.
func (s *permSet) consume(stream, durable, filter string) {
	s.publish(
		"$JS.API.CONSUMER.CREATE."+stream+"."+durable+"."+filter,
		"$JS.API.CONSUMER.INFO."+stream+"."+durable,
		"$JS.API.CONSUMER.MSG.NEXT."+stream+"."+durable,
		"$JS.ACK."+stream+"."+durable+".>",
	)
}

// read: ephemeral consumers over streams (ReadStream, LastPerSubject) and direct reads of their last
// messages.
func (s *permSet) read(streams ...string) {
	for _, stream := range streams {
		s.publish(
			"$JS.API.STREAM.INFO."+stream,
			"$JS.API.CONSUMER.CREATE."+stream+".>",
			"$JS.API.CONSUMER.MSG.NEXT."+stream+".*",
			"$JS.API.CONSUMER.DELETE."+stream+".*",
			"$JS.API.DIRECT.GET."+stream+".>",
			"$JS.API.STREAM.MSG.GET."+stream,
		)
	}
}

// storeRead: get and watch what the stream st behind a bucket or an object store holds.
func (s *permSet) storeRead(st string) {
	s.publish(
		"$JS.API.STREAM.INFO."+st,
		"$JS.API.DIRECT.GET."+st+".>",
		"$JS.API.STREAM.MSG.GET."+st,
		"$JS.API.CONSUMER.CREATE."+st,
		"$JS.API.CONSUMER.CREATE."+st+".>",
		"$JS.API.CONSUMER.DELETE."+st+".>",
		"$JS.FC."+st+".>",
	)
}

// kvRead: get and watch keys of buckets.
func (s *permSet) kvRead(buckets ...string) {
	for _, b := range buckets {
		s.storeRead("KV_" + b)
	}
}

// kvWrite: kvRead plus put, create, update and delete.
func (s *permSet) kvWrite(buckets ...string) {
	for _, b := range buckets {
		s.kvRead(b)
		s.publish("$KV." + b + ".>")
	}
}

// objRead: read objects of stores.
func (s *permSet) objRead(buckets ...string) {
	for _, b := range buckets {
		s.storeRead("OBJ_" + b)
	}
}

// objCreate: objRead plus storing objects (chunks and metadata), without purging the store. Subject
// permissions cannot tell a new object from an overwrite, which is why only content-addressed snapshots
// that every reader verifies are stored this way.
func (s *permSet) objCreate(bucket string) {
	s.objRead(bucket)
	s.publish("$O."+bucket+".C.>", "$O."+bucket+".M.>")
}

// objWrite: objRead plus put and delete.
func (s *permSet) objWrite(buckets ...string) {
	for _, b := range buckets {
		s.objRead(b)
		s.publish("$O."+b+".>", "$JS.API.STREAM.PURGE.OBJ_"+b)
	}
}

func (s *permSet) permissions() Permissions {
	norm := func(in []string) []string {
		out := slices.Clone(in)
		slices.Sort(out)
		return slices.Compact(out)
	}
	return Permissions{Publish: norm(s.pub), Subscribe: norm(s.sub), AllowResponses: s.responses}
}

// WatcherPermissions: publish RepoChanged and SourceHealth, store the snapshots of the commits it fetches (the
// only writer of proxops_trees), read the snapshots clients stored, remember webhook deliveries, consume
// ReconcileRequest and work-tree applies.
func WatcherPermissions() Permissions {
	var s permSet
	s.inbox(string(RoleWatcher))
	s.publish(SubjectRepoChanged)
	s.publish(SubjectRepoHealth)
	s.consume(StreamRepo, ConsumerWatcherReconcile, SubjectReconcileRequest)
	s.consume(StreamRepo, ConsumerWatcherWorktree, FilterWorktreeApply)
	s.objWrite(ObjectTrees, ObjectBlobs)
	s.objRead(ObjectPreviews)
	s.kvWrite(BucketDeliveries)
	return s.permissions()
}

// PlannerPermissions: consume RepoChanged and confirmations, read trees, observe any node, publish plans and
// operations, hold leases, record ownership, and read plans and results back (per-cluster result
// consumers are created as clusters appear).
func PlannerPermissions() Permissions {
	var s permSet
	s.inbox(string(RolePlanner))
	s.publish(subjectPlan+".>", subjectOp+".>", subjectObserve+".>")
	s.consume(StreamRepo, ConsumerPlannerRepo, SubjectRepoChanged)
	s.consume(StreamPlans, ConsumerPlannerConfirm, FilterConfirms)
	s.publish(
		"$JS.API.CONSUMER.CREATE."+StreamResults+".>",
		"$JS.API.CONSUMER.INFO."+StreamResults+".*",
		"$JS.ACK."+StreamResults+".>",
	)
	// Inventory: the nodes of a cluster without an allowlist whose executors published an inventory.
	s.read(StreamPlans, StreamResults, StreamInventory)
	s.objRead(ObjectTrees, ObjectPreviews)
	s.objWrite(ObjectBlobs)
	s.kvWrite(BucketLeases, BucketOwned, BucketClusters)
	s.kvRead(BucketOps)
	return s.permissions()
}

// ExecutorPermissions: one node's executors consume that node's operations and their cluster's work queue
// only, serve the node's observe requests, publish the node's (and the cluster queue's) results,
// inventories and dead letters, keep their own operation records and guest guards, and read the clusters'
// run state and the ownership inventory.
func ExecutorPermissions(cluster, node string) (Permissions, error) {
	user, err := ExecutorUser(cluster, node)
	if err != nil {
		return Permissions{}, err
	}
	inventory, _ := InventorySubject(cluster, node)
	observe, _ := ObserveSubject(cluster, node)
	var s permSet
	s.inbox(user)
	s.workQueue(cluster, node)
	s.publish(inventory)
	s.subscribe(observe)
	// An operation that ran out of deliveries with none settled is announced by the server (workQueue); the
	// node's executors read it from the work queue, dead-letter it and remove it.
	s.publish("$JS.API.STREAM.INFO."+StreamOps, "$JS.API.STREAM.MSG.GET."+StreamOps, "$JS.API.STREAM.MSG.DELETE."+StreamOps)
	s.responses = true
	s.objWrite(ObjectBlobs)
	// Operation records and guest guards: read any (a run opened before records named their node keeps its
	// records under <run>.<op>), write only the node's own (workQueue).
	s.kvRead(BucketOps)
	// Every executor of the cluster also serves the cluster's work queue (the objects that belong to no
	// node), one operation at a time across all of them, with its results, dead letters and records.
	s.workQueue(cluster, ClusterScope)
	// Before running an operation: is its run the cluster's open run, and what does the ownership
	// inventory record for the guest it writes to.
	s.kvRead(BucketClusters, BucketOwned)
	return s.permissions(), nil
}

// workQueue lets an executor consume one work queue of a cluster (a node's, or ClusterScope's), publish
// its results and dead letters, hear the server's advisory about an operation that ran out of deliveries,
// and write the queue's own operation records and guest guards.
func (s *permSet) workQueue(cluster, scope string) {
	op, _ := OpSubject(cluster, scope)
	durable, _ := ExecutorConsumer(cluster, scope)
	result, _ := ResultSubject(cluster, scope)
	dlq, _ := DLQSubject(cluster, scope)
	s.consume(StreamOps, durable, op)
	s.publish(result, dlq)
	advisory, _ := MaxDeliveriesAdvisorySubject(StreamOps, durable)
	s.subscribe(advisory)
	own, _ := NodeOpsFilters(cluster, scope)
	for _, f := range own {
		s.publish("$KV." + BucketOps + "." + f)
	}
}

// AdopterPermissions: consume inventories, read and publish gap reports, read ownership and trees, serve
// adoption requests and observe any node for them.
func AdopterPermissions() Permissions {
	var s permSet
	s.inbox(string(RoleAdopter))
	s.consume(StreamInventory, ConsumerAdopterInventory, FilterInventory)
	s.read(StreamInventory, StreamGaps)
	s.publish(FilterGaps, subjectObserve+".>")
	s.subscribe(FilterAdopt)
	s.responses = true
	s.objRead(ObjectTrees, ObjectPreviews)
	s.objWrite(ObjectBlobs)
	s.kvRead(BucketOwned)
	return s.permissions()
}

// StatusPermissions: read every stream but the work queue, publish and store cluster status.
func StatusPermissions() Permissions {
	var s permSet
	s.inbox(string(RoleStatus))
	s.read(StreamRepo, StreamPlans, StreamResults, StreamInventory, StreamGaps, StreamStatus, StreamDLQ, StreamNotify)
	s.publish(FilterStatus)
	s.objWrite(ObjectBlobs)
	s.kvWrite(BucketStatus)
	s.kvRead(BucketLeases, BucketOwned, BucketClusters)
	return s.permissions()
}

// NotifierPermissions: consume plan events and gap reports (decoding large ones from proxops_blobs), keep its
// memory per cluster and publish how its deliveries went; the notifications themselves leave over HTTP or
// SMTP.
func NotifierPermissions() Permissions {
	var s permSet
	s.inbox(string(RoleNotifier))
	s.consume(StreamPlans, ConsumerNotifierPlans, FilterPlans)
	s.consume(StreamGaps, ConsumerNotifierGaps, FilterGaps)
	s.publish(FilterNotify)
	s.objRead(ObjectBlobs)
	s.kvWrite(BucketNotify)
	return s.permissions()
}

// CLIPermissions: a person's tool reads status and the event streams (proxops status, events), asks for
// reconciles of the deployed commit and for dry runs of its own trees, confirms held plans, asks for
// adoptions and creates preview snapshots in proxops_previews. It cannot apply a work tree, write
// proxops_trees, the ownership inventory or any other record, publish plans or operations, or manage
// JetStream.
func CLIPermissions() Permissions {
	var s permSet
	s.client(string(RoleCLI))
	return s.permissions()
}

// OperatorPermissions: the cli's permissions plus applying a work tree or rolling a guest back to a ProxOps
// snapshot on the user's own subject (WorktreeApplySubject(user)), so the watcher knows who asked, and
// suspending or resuming clusters and rolled-back guests (the planners' control state).
func OperatorPermissions(user string) (Permissions, error) {
	subject, err := WorktreeApplySubject(user)
	if err != nil {
		return Permissions{}, fmt.Errorf("operator permissions: %w", err)
	}
	var s permSet
	s.client(user)
	s.publish(subject)
	s.kvWrite(BucketClusters)
	return s.permissions(), nil
}

// client is what cli and operator users share.
func (s *permSet) client(user string) {
	s.inbox(user)
	s.publish(SubjectReconcileRequest, FilterConfirms, FilterAdopt)
	// Whether the system is provisioned (CheckProvisioned).
	for _, sc := range StreamConfigs(ProvisionConfig{}) {
		s.publish("$JS.API.STREAM.INFO." + sc.Name)
	}
	s.read(StreamRepo, StreamPlans, StreamResults, StreamGaps, StreamStatus, StreamDLQ)
	// Whether a planner took the event answering a request.
	s.publish("$JS.API.CONSUMER.INFO." + StreamRepo + "." + ConsumerPlannerRepo)
	s.kvRead(BucketStatus, BucketClusters, BucketLeases)
	s.objRead(ObjectTrees, ObjectBlobs)
	s.objCreate(ObjectPreviews)
}

// AdminPermissions: create, update and inspect the streams, buckets and object stores of the contract (proxops
// provision), named one by one. Nothing else: no message, key or object of them.
func AdminPermissions() Permissions {
	var s permSet
	s.inbox(string(RoleAdmin))
	// The account's JetStream information (limits, usage), which creating a bucket reads.
	s.publish("$JS.API.INFO")
	var names []string
	for _, sc := range StreamConfigs(ProvisionConfig{}) {
		names = append(names, sc.Name)
	}
	for _, kc := range KeyValueConfigs(ProvisionConfig{}) {
		names = append(names, "KV_"+kc.Bucket)
	}
	for _, oc := range ObjectStoreConfigs(ProvisionConfig{}) {
		names = append(names, "OBJ_"+oc.Bucket)
	}
	for _, n := range names {
		s.publish("$JS.API.STREAM.CREATE."+n, "$JS.API.STREAM.UPDATE."+n, "$JS.API.STREAM.INFO."+n)
	}
	return s.permissions()
}

// ClusterNodes names a cluster and the PVE nodes that run executors.
type ClusterNodes struct {
	Cluster string
	Nodes   []string
}

// ServiceUser is one NATS user of a deployment.
type ServiceUser struct {
	Name        string
	Role        Role
	Permissions Permissions
}

// ServiceUsers returns every user of a deployment: one per service, the cli, operator and admin users, and one
// per executor node, sorted by name.
func ServiceUsers(topology []ClusterNodes) ([]ServiceUser, error) {
	users := []ServiceUser{
		{Name: string(RoleWatcher), Role: RoleWatcher, Permissions: WatcherPermissions()},
		{Name: string(RolePlanner), Role: RolePlanner, Permissions: PlannerPermissions()},
		{Name: string(RoleAdopter), Role: RoleAdopter, Permissions: AdopterPermissions()},
		{Name: string(RoleStatus), Role: RoleStatus, Permissions: StatusPermissions()},
		{Name: string(RoleCLI), Role: RoleCLI, Permissions: CLIPermissions()},
		{Name: string(RoleNotifier), Role: RoleNotifier, Permissions: NotifierPermissions()},
		{Name: string(RoleAdmin), Role: RoleAdmin, Permissions: AdminPermissions()},
	}
	op, err := OperatorPermissions(string(RoleOperator))
	if err != nil {
		return nil, err
	}
	users = append(users, ServiceUser{Name: string(RoleOperator), Role: RoleOperator, Permissions: op})
	seenEnv := map[string]string{}
	for _, u := range users {
		seenEnv[PasswordVariable(u.Name)] = u.Name
	}
	for _, c := range topology {
		for _, n := range c.Nodes {
			name, err := ExecutorUser(c.Cluster, n)
			if err != nil {
				return nil, fmt.Errorf("service users: %w", err)
			}
			p, _ := ExecutorPermissions(c.Cluster, n)
			if other, dup := seenEnv[PasswordVariable(name)]; dup {
				return nil, fmt.Errorf("service users: %s and %s share the password variable %s", other, name, PasswordVariable(name))
			}
			seenEnv[PasswordVariable(name)] = name
			users = append(users, ServiceUser{Name: name, Role: RoleExecutor, Permissions: p})
		}
	}
	slices.SortFunc(users, func(a, b ServiceUser) int { return cmp.Compare(a.Name, b.Name) })
	return users, nil
}

// PasswordVariable is the environment variable a deployment's NATS configuration reads a user's password
// from: PROXOPS_NATS_PASSWORD_<USER> in upper case, '-' as '_'.
func PasswordVariable(user string) string {
	return "PROXOPS_NATS_PASSWORD_" + strings.ToUpper(strings.ReplaceAll(user, "-", "_"))
}

// UsersConfig renders the authorization block of a nats-server configuration for the given users, with
// passwords taken from the environment (PasswordVariable).
func UsersConfig(users []ServiceUser) string {
	var b strings.Builder
	b.WriteString("# ProxOps service users. Generated from internal/bus/permissions.go; do not edit by hand.\n")
	b.WriteString("# Each password comes from the server's environment (PROXOPS_NATS_PASSWORD_<USER>).\n")
	b.WriteString("authorization {\n  users = [\n")
	for _, u := range users {
		fmt.Fprintf(&b, "    # %s\n", u.Role)
		fmt.Fprintf(&b, "    {\n      user: %q\n      password: $%s\n      permissions: {\n", u.Name, PasswordVariable(u.Name))
		writeList(&b, "publish", u.Permissions.Publish)
		writeList(&b, "subscribe", u.Permissions.Subscribe)
		if u.Permissions.AllowResponses {
			fmt.Fprintf(&b, "        allow_responses: { max: 1, expires: %q }\n", ResponseTTL.String())
		}
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

func writeList(b *strings.Builder, name string, subjects []string) {
	fmt.Fprintf(b, "        %s: { allow: [\n", name)
	for _, s := range subjects {
		fmt.Fprintf(b, "          %q\n", s)
	}
	b.WriteString("        ] }\n")
}
