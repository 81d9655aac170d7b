package kubernetes_test

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

const (
	rmadConfigDir  = "/etc/onerma/config"
	rmadConfigKey  = "rmad.json"
	socketsHostDir = "/run/onerma"
)

// rmadConfig is the ConfigMap's rmad.json: raw as a tree of maps (its
// keys checked against rmad's embedded default, which has every key rmad
// knows), and the values this test looks at.
type rmadConfig struct {
	raw    map[string]any
	Engine struct {
		IVState string `json:"iv_state"`
	} `json:"engine"`
	Ctl struct {
		IDState    string `json:"id_state"`
		Socket     string `json:"socket"`
		SocketMode string `json:"socket_mode"`
		Sockets    []struct {
			Path   string `json:"path"`
			Mode   string `json:"mode"`
			Name   string `json:"name"`
			Tenant string `json:"tenant"`
		} `json:"sockets"`
	} `json:"ctl"`
}

func loadRmadConfig(t *testing.T, objs []any) rmadConfig {
	t.Helper()
	var text string
	for _, cm := range find[corev1.ConfigMap](t, objs) {
		if cm.Name == "rmad-config" {
			text = cm.Data[rmadConfigKey]
		}
	}
	if text == "" {
		t.Fatalf("no ConfigMap rmad-config with key %s", rmadConfigKey)
	}
	var c rmadConfig
	d := json.NewDecoder(strings.NewReader(text))
	d.UseNumber()
	if err := d.Decode(&c.raw); err != nil || d.More() {
		t.Fatalf("rmad.json: %v (or trailing data)", err)
	}
	def, err := os.ReadFile("../../tools/rmad/default.json")
	if err != nil {
		t.Fatal(err)
	}
	var defTree map[string]any
	if err := json.Unmarshal(def, &defTree); err != nil {
		t.Fatal(err)
	}
	checkKeys(t, "rmad.json", c.raw, defTree)
	ctl := c.raw["ctl"].(map[string]any)
	defCtl := defTree["ctl"].(map[string]any)
	entryKeys := socketEntryKeys(t)
	socks, _ := ctl["sockets"].([]any)
	for i, s := range socks {
		m := s.(map[string]any)
		where := "rmad.json: ctl.sockets[" + strconv.Itoa(i) + "]"
		for k, v := range m {
			switch {
			case !slices.Contains(entryKeys, k):
				t.Errorf("%s: key %q is not one of rmad's %v", where, k, entryKeys)
			case k == "slot_policy" || k == "quota":
				checkKeys(t, where+"."+k, v.(map[string]any), defCtl[k].(map[string]any))
			}
		}
	}
	// The keys are rmad's; now the values this test looks at.
	if err := json.Unmarshal([]byte(text), &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// checkKeys fails every key of got that rmad's default does not have, and
// every value whose JSON kind differs from the default's.
func checkKeys(t *testing.T, where string, got, def map[string]any) {
	t.Helper()
	for k, v := range got {
		dv, ok := def[k]
		if !ok {
			t.Errorf("%s: rmad has no key %q", where, k)
			continue
		}
		if sub, ok := v.(map[string]any); ok {
			dsub, ok := dv.(map[string]any)
			if !ok {
				t.Errorf("%s.%s: an object where rmad has %T", where, k, dv)
				continue
			}
			checkKeys(t, where+"."+k, sub, dsub)
			continue
		}
		_, isNum := v.(json.Number)
		_, defNum := dv.(float64)
		_, defStr := dv.(string)
		_, isStr := v.(string)
		if reflect.TypeOf(v) != reflect.TypeOf(dv) && !(isNum && defNum) && !(isNum && defStr || isStr && defNum) {
			// numbers and strings interchange only where rmad takes
			// either (quota amounts: a count or "N%")
			t.Errorf("%s.%s: %T where rmad has %T", where, k, v, dv)
		}
	}
}

// socketEntryKeys are the JSON keys of rmad's ctl.sockets entries, read
// from the source of its SocketEntry type (package main, so not
// importable).
func socketEntryKeys(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../../tools/rmad/ctl.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "SocketEntry" {
			return true
		}
		for _, fld := range ts.Type.(*ast.StructType).Fields.List {
			tag, _ := strconv.Unquote(fld.Tag.Value)
			name, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
			keys = append(keys, name)
		}
		return false
	})
	if len(keys) == 0 {
		t.Fatal("no SocketEntry in tools/rmad/ctl.go")
	}
	return keys
}

func rmad(t *testing.T, objs []any) (*appsv1.DaemonSet, *corev1.Container) {
	t.Helper()
	for _, ds := range find[appsv1.DaemonSet](t, objs) {
		for i := range ds.Spec.Template.Spec.Containers {
			if c := &ds.Spec.Template.Spec.Containers[i]; c.Name == "rmad" {
				return ds, c
			}
		}
	}
	t.Fatal("no DaemonSet with an rmad container")
	return nil, nil
}

func TestRmadDaemonSet(t *testing.T) {
	objs := manifests(t)
	ds, c := rmad(t, objs)
	spec := &ds.Spec.Template.Spec
	guaranteed(t, "DaemonSet "+ds.Name, spec)
	if !reflect.DeepEqual(ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels) {
		t.Errorf("selector %v does not select the template's labels %v", ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)
	}

	// The VF: the NAD the Multus annotation names, its resource requested.
	nads := find[NetworkAttachmentDefinition](t, objs)
	nad := nads[0]
	if got, want := ds.Spec.Template.Annotations["k8s.v1.cni.cncf.io/networks"], nad.Namespace+"/"+nad.Name; got != want {
		t.Errorf("Multus networks annotation %q, want %q", got, want)
	}
	var cni map[string]any
	if err := json.Unmarshal([]byte(nad.Spec.Config), &cni); err != nil || cni["type"] != "sriov" || cni["name"] != nad.Name {
		t.Errorf("NAD config %v (%v): want an sriov CNI config named %s", cni, err, nad.Name)
	}
	res := nad.Annotations["k8s.v1.cni.cncf.io/resourceName"]
	if q := c.Resources.Limits[corev1.ResourceName(res)]; q.Value() != 1 {
		t.Errorf("rmad asks for %v of %q, want 1", q.String(), res)
	}
	checkDevicePlugin(t, objs, res)

	// The entrypoint: the VF's PCI address from the device plugin's
	// variable, the config from the ConfigMap, the metrics port.
	if !slices.Equal(c.Command, []string{"/bin/sh", "-c"}) || len(c.Args) != 1 {
		t.Fatalf("rmad's command %q %q: want a /bin/sh -c script", c.Command, c.Args)
	}
	script := c.Args[0]
	if out, err := exec.Command("sh", "-n", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("entrypoint script: %v: %s", err, out)
	}
	args := runEntrypoint(t, script, deviceEnv(res))
	for _, want := range [][]string{
		{"-config", path.Join(rmadConfigDir, rmadConfigKey)},
		{"-vdev", ""},
		{"-port-name", "0000:3b:02.1"},
		{"-ip", "10.1.0.2/24"},
		{"-gateway", "10.1.0.1"},
		{"-metrics", ":9464"},
	} {
		if i := slices.Index(args, want[0]); i < 0 || i+1 >= len(args) || args[i+1] != want[1] {
			t.Errorf("rmad's arguments %q: want %s %q", args, want[0], want[1])
		}
	}
	if i := slices.Index(args, "-eal"); i < 0 || !strings.HasPrefix(args[i+1], "--allow=0000:3b:02.1 --in-memory --lcores=0@") {
		t.Errorf("rmad's arguments %q: want -eal allowing only the first VF", args)
	}
	if i := slices.Index(args, "-cpu"); i < 0 || args[i+1] == "" {
		t.Errorf("rmad's arguments %q: want -cpu N", args)
	}
	m := mountOf(c, rmadConfigDir)
	if v := volume(spec, m.Name); m == nil || v == nil || v.ConfigMap == nil || v.ConfigMap.Name != "rmad-config" {
		t.Errorf("%s is not the ConfigMap rmad-config", rmadConfigDir)
	}

	// Metrics: the scrape annotations name the port rmad listens on.
	a := ds.Spec.Template.Annotations
	if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != "9464" || a["prometheus.io/path"] != "/metrics" {
		t.Errorf("scrape annotations %v", a)
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 9464 {
		t.Errorf("ports %v: want 9464", c.Ports)
	}

	// Least privilege: no host namespaces, not privileged, only the
	// capabilities a vfio and huge page DPDK engine needs.
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Error("rmad's pod shares a host namespace")
	}
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"IPC_LOCK", "SYS_NICE", "SYS_RESOURCE"}) {
		t.Errorf("rmad's securityContext %+v: want unprivileged, ALL dropped, IPC_LOCK SYS_NICE SYS_RESOURCE added", sc)
	}

	// State and sockets on the host; huge pages.
	cfg := loadRmadConfig(t, objs)
	for _, f := range []string{cfg.Engine.IVState, cfg.Ctl.IDState} {
		if f == "" || hostPathAt(spec, c, path.Dir(f)) != path.Dir(f) {
			t.Errorf("state file %q is not on a hostPath mounted at its directory", f)
		}
	}
	if hostPathAt(spec, c, socketsHostDir) != socketsHostDir {
		t.Errorf("%s is not the host's", socketsHostDir)
	}
	checkSocketDirs(t, spec, cfg)
	if m := mountOf(c, "/dev/hugepages"); m == nil || volume(spec, m.Name).EmptyDir == nil ||
		volume(spec, m.Name).EmptyDir.Medium != "HugePages-2Mi" {
		t.Error("no HugePages-2Mi volume at /dev/hugepages")
	}
}

// runEntrypoint runs the DaemonSet's script with rmad replaced by a
// printer, a node.env and the device plugin's variable (two VFs), and
// returns rmad's arguments.
func runEntrypoint(t *testing.T, script, env string) []string {
	t.Helper()
	dir := t.TempDir()
	nodeEnv := path.Join(dir, "node.env")
	if err := os.WriteFile(nodeEnv, []byte("ENGINE_IP=10.1.0.2/24\nENGINE_GATEWAY=10.1.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]string{{"exec /usr/local/bin/rmad", "exec printf '%s\\n'"}, {"/etc/onerma/node.env", nodeEnv}} {
		if !strings.Contains(script, r[0]) {
			t.Fatalf("entrypoint has no %q", r[0])
		}
		script = strings.ReplaceAll(script, r[0], r[1])
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), env + "=0000:3b:02.1,0000:3b:02.2"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if strings.Contains(stderr.String(), "want two exclusive CPUs") {
			t.Skipf("this process has fewer than two CPUs: %s", stderr.String())
		}
		t.Fatalf("entrypoint: %v: %s", err, stderr.String())
	}
	return strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
}

// checkDevicePlugin checks the SR-IOV device plugin's resource list
// advertises res from VFs bound to vfio-pci.
func checkDevicePlugin(t *testing.T, objs []any, res string) {
	t.Helper()
	for _, cm := range find[corev1.ConfigMap](t, objs) {
		if cm.Name != "sriovdp-config" {
			continue
		}
		var dp struct {
			ResourceList []struct {
				ResourceName   string `json:"resourceName"`
				ResourcePrefix string `json:"resourcePrefix"`
				Selectors      struct {
					Vendors []string `json:"vendors"`
					Devices []string `json:"devices"`
					Drivers []string `json:"drivers"`
				} `json:"selectors"`
			} `json:"resourceList"`
		}
		d := json.NewDecoder(strings.NewReader(cm.Data["config.json"]))
		d.DisallowUnknownFields()
		if err := d.Decode(&dp); err != nil {
			t.Fatalf("sriovdp-config: %v", err)
		}
		for _, r := range dp.ResourceList {
			if r.ResourcePrefix+"/"+r.ResourceName == res {
				if !slices.Equal(r.Selectors.Drivers, []string{"vfio-pci"}) {
					t.Errorf("%s: drivers %v, want vfio-pci (DPDK drives the VF)", res, r.Selectors.Drivers)
				}
				return
			}
		}
		t.Errorf("sriovdp-config does not advertise %s", res)
		return
	}
	t.Error("no ConfigMap sriovdp-config")
}

func TestRmadConfigSockets(t *testing.T) {
	cfg := loadRmadConfig(t, manifests(t))
	if path.Dir(cfg.Ctl.Socket) != socketsHostDir+"/admin" || cfg.Ctl.SocketMode != "0600" {
		t.Errorf("host socket %q mode %q: want root's alone, in %s/admin", cfg.Ctl.Socket, cfg.Ctl.SocketMode, socketsHostDir)
	}
	if len(cfg.Ctl.Sockets) < 2 {
		t.Fatalf("%d tenant sockets, want at least two", len(cfg.Ctl.Sockets))
	}
	dirs := map[string]bool{}
	for _, s := range cfg.Ctl.Sockets {
		if want := path.Join(socketsHostDir, s.Name, "rmad.sock"); s.Path != want || s.Name == "admin" {
			t.Errorf("tenant %q socket %q, want %q", s.Name, s.Path, want)
		}
		if dirs[path.Dir(s.Path)] {
			t.Errorf("two tenants share %s", path.Dir(s.Path))
		}
		dirs[path.Dir(s.Path)] = true
		if s.Tenant != "socket" {
			t.Errorf("socket %s: tenant %q, want \"socket\" (one tenant per namespace)", s.Path, s.Tenant)
		}
	}
}

func TestApplicationDeployment(t *testing.T) {
	objs := manifests(t)
	cfg := loadRmadConfig(t, objs)
	tenants := map[string]string{}
	for _, s := range cfg.Ctl.Sockets {
		tenants[path.Dir(s.Path)] = s.Mode
	}
	namespaces := map[string]*corev1.Namespace{}
	for _, ns := range find[corev1.Namespace](t, objs) {
		namespaces[ns.Name] = ns
	}
	// What the policy refuses: policy_test.go evaluates it.
	vap := find[admissionv1.ValidatingAdmissionPolicy](t, objs)[0]
	binding := find[admissionv1.ValidatingAdmissionPolicyBinding](t, objs)[0]
	if binding.Spec.PolicyName != vap.Name || !slices.Equal(binding.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) ||
		binding.Spec.MatchResources.NamespaceSelector.MatchLabels["onerma.io/tenant"] != "true" {
		t.Errorf("the policy binding %+v does not deny in tenant namespaces", binding.Spec)
	}
	rmaperf, err := os.ReadFile("../../tools/rmaperf/main.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range find[appsv1.Deployment](t, objs) {
		spec := &d.Spec.Template.Spec
		guaranteed(t, "Deployment "+d.Name, spec)
		ns := namespaces[d.Namespace]
		if ns == nil || ns.Labels["onerma.io/tenant"] != "true" {
			t.Errorf("Deployment %s: namespace %q is not a labelled tenant namespace", d.Name, d.Namespace)
		}
		own := path.Join(socketsHostDir, d.Namespace)
		mode, ok := tenants[own]
		if !ok {
			t.Errorf("Deployment %s: rmad serves no socket in %s", d.Name, own)
		}
		for _, v := range spec.Volumes {
			if v.HostPath != nil && v.HostPath.Path != own {
				t.Errorf("Deployment %s mounts host path %s: only %s is its own", d.Name, v.HostPath.Path, own)
			}
			if v.HostPath != nil && (v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectory) {
				t.Errorf("Deployment %s: host path %s of type %v, want Directory (rmad's DaemonSet makes it)", d.Name, v.HostPath.Path, v.HostPath.Type)
			}
		}
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			for _, m := range c.VolumeMounts {
				if v := volume(spec, m.Name); v != nil && v.HostPath != nil && !m.ReadOnly {
					t.Errorf("Deployment %s/%s mounts %s writable", d.Name, c.Name, v.HostPath.Path)
				}
			}
		}
		if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("Deployment %s: the pod does not set runAsNonRoot", d.Name)
		}
		c := &spec.Containers[0]
		if m, _ := strconv.ParseUint(mode, 8, 32); spec.SecurityContext.RunAsUser != nil && *spec.SecurityContext.RunAsUser != 0 && m&0o006 != 0o006 {
			t.Errorf("Deployment %s runs as uid %d; socket mode %s lets only its owner in", d.Name, *spec.SecurityContext.RunAsUser, mode)
		}
		var mnt string
		for _, m := range c.VolumeMounts {
			if v := volume(spec, m.Name); v != nil && v.HostPath != nil {
				mnt = m.MountPath
			}
		}
		if mnt == "" {
			t.Fatalf("Deployment %s does not mount its socket directory", d.Name)
		}
		fields := strings.Fields(c.Args[0])
		i := slices.IndexFunc(fields, func(f string) bool { return f == "-socket" || f == "-ctl" }) // -ctl: the old spelling
		if i < 0 || fields[i+1] != path.Join(mnt, "rmad.sock") {
			t.Errorf("Deployment %s: %q does not dial %s", d.Name, c.Args[0], path.Join(mnt, "rmad.sock"))
		}
		if i := slices.Index(fields, "/usr/local/bin/rmaperf"); i < 0 || !bytes.Contains(rmaperf, []byte("//\trmaperf "+fields[i+1]+" ")) {
			t.Errorf("Deployment %s: not an rmaperf subcommand: %q", d.Name, c.Args[0])
		}
		if m := mountOf(c, "/dev/hugepages"); m == nil || volume(spec, m.Name).EmptyDir == nil ||
			volume(spec, m.Name).EmptyDir.Medium != "HugePages-2Mi" {
			t.Errorf("Deployment %s: no HugePages-2Mi volume", d.Name)
		}
		if sc := c.SecurityContext; sc == nil || sc.Capabilities == nil || len(sc.Capabilities.Add) != 0 ||
			!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("Deployment %s: the application needs no capability", d.Name)
		}
	}
}

// checkSocketDirs: an init container of rmad's pod makes the directory of
// every control socket of the config, admin's included, in the host's
// socket directory, before rmad starts, and nothing else; without a
// capability or privilege.
func checkSocketDirs(t *testing.T, spec *corev1.PodSpec, cfg rmadConfig) {
	t.Helper()
	want := []string{path.Dir(cfg.Ctl.Socket)}
	for _, s := range cfg.Ctl.Sockets {
		want = append(want, path.Dir(s.Path))
	}
	slices.Sort(want)
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		if c.Name != "socket-dirs" {
			continue
		}
		if len(c.Command) < 4 || !slices.Equal(c.Command[:4], []string{"/bin/mkdir", "-p", "-m", "0755"}) {
			t.Fatalf("init container %s: command %q, want /bin/mkdir -p -m 0755 DIR...", c.Name, c.Command)
		}
		got := slices.Sorted(slices.Values(c.Command[4:]))
		if !slices.Equal(got, want) {
			t.Errorf("init container %s makes %q, want the config's socket directories %q", c.Name, got, want)
		}
		if hostPathAt(spec, c, socketsHostDir) != socketsHostDir {
			t.Errorf("init container %s: %s is not the host's", c.Name, socketsHostDir)
		}
		if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || *sc.Privileged || sc.Capabilities == nil ||
			len(sc.Capabilities.Add) != 0 || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("init container %s: securityContext %+v, want unprivileged with every capability dropped", c.Name, sc)
		}
		return
	}
	t.Error("rmad's pod has no init container socket-dirs making the tenants' socket directories")
}

// TestMetricsNetworkPolicy: a NetworkPolicy selects rmad's pods and lets
// only the monitoring namespace reach the metrics port rmad listens on,
// and nothing else.
func TestMetricsNetworkPolicy(t *testing.T) {
	objs := manifests(t)
	ds, c := rmad(t, objs)
	np := find[networkingv1.NetworkPolicy](t, objs)[0]
	if np.Namespace != ds.Namespace || !reflect.DeepEqual(np.Spec.PodSelector.MatchLabels, ds.Spec.Template.Labels) {
		t.Errorf("NetworkPolicy %s/%s selects %v, want rmad's pods %s %v", np.Namespace, np.Name, np.Spec.PodSelector.MatchLabels, ds.Namespace, ds.Spec.Template.Labels)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || len(np.Spec.Ingress) != 1 {
		t.Fatalf("NetworkPolicy %s: types %v, %d ingress rules: want one Ingress rule", np.Name, np.Spec.PolicyTypes, len(np.Spec.Ingress))
	}
	rule := np.Spec.Ingress[0]
	if len(rule.From) != 1 || rule.From[0].PodSelector != nil || rule.From[0].IPBlock != nil || rule.From[0].NamespaceSelector == nil ||
		!reflect.DeepEqual(rule.From[0].NamespaceSelector.MatchLabels, map[string]string{"kubernetes.io/metadata.name": "monitoring"}) {
		t.Errorf("NetworkPolicy %s: from %+v, want the namespace monitoring only", np.Name, rule.From)
	}
	if len(rule.Ports) != 1 || rule.Ports[0].Port == nil || rule.Ports[0].Port.IntValue() != int(c.Ports[0].ContainerPort) ||
		rule.Ports[0].Protocol == nil || *rule.Ports[0].Protocol != corev1.ProtocolTCP {
		t.Errorf("NetworkPolicy %s: ports %+v, want TCP %d (rmad's metrics)", np.Name, rule.Ports, c.Ports[0].ContainerPort)
	}
	f := strings.Fields(c.Args[0])
	if i := slices.Index(f, "-metrics"); i < 0 || i+1 >= len(f) || f[i+1] != ":"+strconv.Itoa(int(c.Ports[0].ContainerPort)) {
		t.Errorf("rmad's metrics are not on port %d", c.Ports[0].ContainerPort)
	}
}
