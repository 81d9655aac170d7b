package kubernetes_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// The tenant admission policy of rmad-daemonset.yaml, evaluated as the
// API server evaluates a ValidatingAdmissionPolicy: with cel-go, the
// library Kubernetes compiles and runs admission expressions with. The
// object is the pod as the API server hands it to admission, the typed
// object turned into an unstructured map (runtime.DefaultUnstructuredConverter:
// fields left empty are absent, integers int64); request, oldObject,
// params and namespaceObject are the request's. The variables are
// evaluated in order and reached as variables.NAME; each validation must
// evaluate to true, and a false one refuses the request with its message
// (failurePolicy Fail: an evaluation error refuses too, and fails this
// test, which wants every refusal to be a rule's verdict).
//
// Kubernetes declares object and oldObject with the resource's schema
// and type-checks against it; here they are dyn, so a misspelt field
// would show only as a has() that is always false, or an evaluation
// error. The hostile pods below are decoded strictly into corev1.Pod
// first (no field they set is unknown), and each violates one rule, which
// must be the rule that refuses it.

// celEnv is the environment of a ValidatingAdmissionPolicy's expressions:
// its variables, and the options and extension libraries of Kubernetes'
// base environment (k8s.io/apiserver/pkg/cel/environment) that cel-go
// has. Kubernetes' own libraries (quantity, IP, CIDR, URL, regex find,
// authorizer, lists' isSorted/sum/indexOf) are not here: an expression
// that calls one fails to compile, and the test must then grow them.
func celEnv(t *testing.T) *cel.Env {
	t.Helper()
	env, err := cel.NewEnv(
		cel.Variable("object", cel.DynType),
		cel.Variable("oldObject", cel.DynType),
		cel.Variable("request", cel.DynType),
		cel.Variable("params", cel.DynType),
		cel.Variable("namespaceObject", cel.DynType),
		cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)),
		cel.HomogeneousAggregateLiterals(),
		cel.EagerlyValidateDeclarations(true),
		cel.DefaultUTCTimeZone(true),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		ext.Strings(ext.StringsVersion(2)),
		ext.Sets(),
	)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// perCallLimit is Kubernetes' runtime cost limit of one expression
// (k8s.io/apiserver/pkg/apis/cel.PerCallLimit).
const perCallLimit = 1000000

type celProgram struct {
	name, expression, message string
	prg                       cel.Program
}

// policy is a ValidatingAdmissionPolicy's expressions, compiled.
type policy struct {
	vap         *admissionv1.ValidatingAdmissionPolicy
	variables   []celProgram
	validations []celProgram
}

func compilePolicy(t *testing.T, vap *admissionv1.ValidatingAdmissionPolicy) *policy {
	t.Helper()
	env := celEnv(t)
	compile := func(what, expr string) cel.Program {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("policy %s: %s: %v", vap.Name, what, iss.Err())
		}
		prg, err := env.Program(ast, cel.CostLimit(perCallLimit))
		if err != nil {
			t.Fatalf("policy %s: %s: %v", vap.Name, what, err)
		}
		return prg
	}
	p := &policy{vap: vap}
	for _, v := range vap.Spec.Variables {
		p.variables = append(p.variables, celProgram{name: v.Name, expression: v.Expression, prg: compile("variable "+v.Name, v.Expression)})
	}
	for i, v := range vap.Spec.Validations {
		if v.Message == "" {
			t.Fatalf("policy %s: validation %d has no message", vap.Name, i)
		}
		p.validations = append(p.validations, celProgram{expression: v.Expression, message: v.Message, prg: compile(fmt.Sprintf("validation %d", i), v.Expression)})
	}
	return p
}

// matches says whether the policy's matchConstraints select a request
// of operation on resource/subresource of the core group's v1.
func (p *policy) matches(resource, subresource, operation string) bool {
	name := resource
	if subresource != "" {
		name += "/" + subresource
	}
	for _, r := range p.vap.Spec.MatchConstraints.ResourceRules {
		if slices.Contains(r.APIGroups, "") && slices.Contains(r.APIVersions, "v1") &&
			slices.Contains(r.Resources, name) && slices.ContainsFunc(r.Operations, func(o admissionv1.OperationType) bool {
			return string(o) == operation || o == admissionv1.OperationAll
		}) {
			return true
		}
	}
	return false
}

// admissionRequest is one request as the policy sees it.
type admissionRequest struct {
	operation   string // CREATE, UPDATE
	subresource string // "" or "ephemeralcontainers"
	object      *corev1.Pod
	oldObject   *corev1.Pod // UPDATE
}

// admit evaluates the policy on req as the API server would, and returns
// the messages of the validations that refuse it (none: admitted).
func (p *policy) admit(t *testing.T, req admissionRequest, ns *corev1.Namespace) []string {
	t.Helper()
	if !p.matches("pods", req.subresource, req.operation) {
		t.Fatalf("policy %s does not match %s of pods/%s", p.vap.Name, req.operation, req.subresource)
	}
	act := map[string]any{
		"object":          unstructured(t, req.object),
		"oldObject":       nil,
		"params":          nil,
		"namespaceObject": unstructured(t, ns),
		"request": map[string]any{
			"kind":        map[string]any{"group": "", "version": "v1", "kind": "Pod"},
			"resource":    map[string]any{"group": "", "version": "v1", "resource": "pods"},
			"subResource": req.subresource,
			"name":        req.object.Name,
			"namespace":   req.object.Namespace,
			"operation":   req.operation,
			"userInfo":    map[string]any{"username": "tenant", "groups": []any{"system:authenticated"}},
		},
	}
	if req.oldObject != nil {
		act["oldObject"] = unstructured(t, req.oldObject)
	}
	vars := map[string]ref.Val{}
	act["variables"] = vars
	for _, v := range p.variables {
		val, _, err := v.prg.Eval(act)
		if err != nil {
			t.Fatalf("variable %s = %s: %v", v.name, v.expression, err)
		}
		vars[v.name] = val
	}
	var refused []string
	for _, v := range p.validations {
		val, _, err := v.prg.Eval(act)
		if err != nil {
			t.Fatalf("validation %q: evaluation error (the request would be refused by failurePolicy, not by the rule): %v", v.message, err)
		}
		b, ok := val.(types.Bool)
		if !ok {
			t.Fatalf("validation %q: %v of type %v, want a bool", v.message, val, val.Type())
		}
		if !b {
			refused = append(refused, v.message)
		}
	}
	return refused
}

// unstructured is obj as admission's CEL sees it.
func unstructured(t *testing.T, obj any) map[string]any {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// tenantPolicy is the policy bound in the tenant namespaces, and
// namespace team-a, which the binding selects.
func tenantPolicy(t *testing.T) (*policy, *corev1.Namespace) {
	t.Helper()
	objs := manifests(t)
	vap := find[admissionv1.ValidatingAdmissionPolicy](t, objs)[0]
	binding := find[admissionv1.ValidatingAdmissionPolicyBinding](t, objs)[0]
	if binding.Spec.PolicyName != vap.Name || vap.Spec.FailurePolicy == nil || *vap.Spec.FailurePolicy != admissionv1.Fail {
		t.Fatalf("policy %s (failurePolicy %v) is not the one bound (%s), or does not fail closed", vap.Name, vap.Spec.FailurePolicy, binding.Spec.PolicyName)
	}
	sel, err := metav1.LabelSelectorAsSelector(binding.Spec.MatchResources.NamespaceSelector)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range find[corev1.Namespace](t, objs) {
		if ns.Name == "team-a" {
			if !sel.Matches(labels.Set(ns.Labels)) {
				t.Fatalf("the binding's selector %v does not select namespace team-a %v", sel, ns.Labels)
			}
			return compilePolicy(t, vap), ns
		}
	}
	t.Fatal("no namespace team-a")
	return nil, nil
}

// TestPolicyAdmitsExampleApplication: the pod of app-deployment.yaml, as
// its ReplicaSet creates it, is admitted.
func TestPolicyAdmitsExampleApplication(t *testing.T) {
	p, ns := tenantPolicy(t)
	for _, d := range find[appsv1.Deployment](t, manifests(t)) {
		pod := &corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: *d.Spec.Template.ObjectMeta.DeepCopy(),
			Spec:       *d.Spec.Template.Spec.DeepCopy(),
		}
		pod.Name, pod.Namespace = d.Name+"-7d4b9c-x2x9q", d.Namespace
		if refused := p.admit(t, admissionRequest{operation: "CREATE", object: pod}, ns); len(refused) != 0 {
			t.Errorf("Deployment %s's pod refused: %q", d.Name, refused)
		}
	}
}

// compliantPod is a tenant pod every rule admits; each case of
// TestPolicyRefusesHostilePods changes one thing of it.
const compliantPod = `
apiVersion: v1
kind: Pod
metadata: {name: app, namespace: team-a}
spec:
  securityContext: {runAsNonRoot: true, runAsUser: 1000}
  containers:
    - name: app
      image: registry.example.com/onerma-app:latest
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
      volumeMounts: [{name: onerma, mountPath: /run/onerma, readOnly: true}]
  volumes:
    - {name: onerma, hostPath: {path: /run/onerma/team-a, type: Directory}}
`

// The rules, by a word of their message.
const (
	ruleHostPath   = "mounts no host path but"
	ruleReadOnly   = "read-only"
	ruleHostNS     = "shares no host namespace"
	rulePrivileged = "not privileged and add no capability"
	ruleEscalation = "allowPrivilegeEscalation false"
	ruleNonRoot    = "runs as non-root"
)

// TestPolicyRefusesHostilePods: each pod a tenant might send to take the
// node or the other tenants' sockets is refused by the rule it breaks,
// and only by it; a debug container with kubectl debug's restricted
// profile is admitted.
func TestPolicyRefusesHostilePods(t *testing.T) {
	p, ns := tenantPolicy(t)
	debugger := `{name: debugger, image: registry.example.com/debug:latest, targetContainerName: app, ` +
		`securityContext: {runAsNonRoot: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}}`
	app := func(sc string) string {
		return `[{name: app, image: registry.example.com/onerma-app:latest, securityContext: ` + sc +
			`, volumeMounts: [{name: onerma, mountPath: /run/onerma, readOnly: true}]}]`
	}
	for _, c := range []struct {
		name  string
		patch string // merged into compliantPod: maps merge, anything else replaces
		// ephemeral: the patch is kubectl debug's UPDATE of
		// pods/ephemeralcontainers of the compliant pod.
		ephemeral bool
		refused   []string // the rules that refuse it, none: admitted
	}{
		{name: "compliant"},
		{name: "kubectl debug --profile=restricted", ephemeral: true,
			patch: `spec: {ephemeralContainers: [` + debugger + `]}`},
		{name: "privileged ephemeral container (kubectl debug --profile=sysadmin)", ephemeral: true,
			patch:   `spec: {ephemeralContainers: [{name: debugger, image: busybox, targetContainerName: app, securityContext: {privileged: true}}]}`,
			refused: []string{rulePrivileged, ruleEscalation}},
		{name: "ephemeral container adding SYS_ADMIN", ephemeral: true,
			patch:   `spec: {ephemeralContainers: [{name: debugger, image: busybox, securityContext: {allowPrivilegeEscalation: false, capabilities: {add: [SYS_ADMIN]}}}]}`,
			refused: []string{rulePrivileged}},
		{name: "ephemeral container as root", ephemeral: true,
			patch:   `spec: {ephemeralContainers: [{name: debugger, image: busybox, securityContext: {runAsUser: 0, allowPrivilegeEscalation: false}}]}`,
			refused: []string{ruleNonRoot}},
		{name: "ephemeral container mounting the socket directory writable", ephemeral: true,
			patch:   `spec: {ephemeralContainers: [{name: debugger, image: busybox, securityContext: {allowPrivilegeEscalation: false}, volumeMounts: [{name: onerma, mountPath: /s}]}]}`,
			refused: []string{ruleReadOnly}},
		{name: "root container",
			patch:   `spec: {containers: ` + app(`{runAsUser: 0, allowPrivilegeEscalation: false}`) + `}`,
			refused: []string{ruleNonRoot}},
		{name: "container overriding runAsNonRoot",
			patch:   `spec: {containers: ` + app(`{runAsNonRoot: false, allowPrivilegeEscalation: false}`) + `}`,
			refused: []string{ruleNonRoot}},
		{name: "pod as uid 0",
			patch:   `spec: {securityContext: {runAsNonRoot: true, runAsUser: 0}}`,
			refused: []string{ruleNonRoot}},
		{name: "pod without runAsNonRoot (the image's user, maybe root)",
			patch:   `spec: {securityContext: {runAsUser: 1000, runAsNonRoot: null}}`,
			refused: []string{ruleNonRoot}},
		{name: "root init container",
			patch:   `spec: {initContainers: [{name: init, image: busybox, securityContext: {runAsUser: 0, allowPrivilegeEscalation: false}}]}`,
			refused: []string{ruleNonRoot}},
		{name: "writable socket hostPath",
			patch:   `spec: {containers: [{name: app, image: x, securityContext: {allowPrivilegeEscalation: false}, volumeMounts: [{name: onerma, mountPath: /run/onerma}]}]}`,
			refused: []string{ruleReadOnly}},
		{name: "init container mounting the socket directory writable",
			patch:   `spec: {initContainers: [{name: init, image: busybox, securityContext: {allowPrivilegeEscalation: false}, volumeMounts: [{name: onerma, mountPath: /s, readOnly: false}]}]}`,
			refused: []string{ruleReadOnly}},
		{name: "another tenant's socket directory",
			patch:   `spec: {volumes: [{name: onerma, hostPath: {path: /run/onerma/team-b, type: Directory}}]}`,
			refused: []string{ruleHostPath}},
		{name: "the host's socket directory",
			patch:   `spec: {volumes: [{name: onerma, hostPath: {path: /run/onerma}}]}`,
			refused: []string{ruleHostPath}},
		{name: "hostPID", patch: `spec: {hostPID: true}`, refused: []string{ruleHostNS}},
		{name: "hostNetwork", patch: `spec: {hostNetwork: true}`, refused: []string{ruleHostNS}},
		{name: "hostIPC", patch: `spec: {hostIPC: true}`, refused: []string{ruleHostNS}},
		{name: "privileged container",
			patch:   `spec: {containers: ` + app(`{privileged: true}`) + `}`,
			refused: []string{rulePrivileged, ruleEscalation}},
		{name: "added capability",
			patch:   `spec: {containers: ` + app(`{allowPrivilegeEscalation: false, capabilities: {add: [NET_ADMIN]}}`) + `}`,
			refused: []string{rulePrivileged}},
		{name: "privilege escalation allowed (setuid binaries)",
			patch:   `spec: {containers: ` + app(`{capabilities: {drop: [ALL]}}`) + `}`,
			refused: []string{ruleEscalation}},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := podFromYAML(t, mergeYAML(t, compliantPod, ""))
			pod := podFromYAML(t, mergeYAML(t, compliantPod, c.patch))
			req := admissionRequest{operation: "CREATE", object: pod}
			if c.ephemeral {
				req = admissionRequest{operation: "UPDATE", subresource: "ephemeralcontainers", object: pod, oldObject: base}
			}
			refused := p.admit(t, req, ns)
			var rules []string
			for _, msg := range refused {
				rule := ""
				for _, r := range []string{ruleHostPath, ruleReadOnly, ruleHostNS, rulePrivileged, ruleEscalation, ruleNonRoot} {
					if strings.Contains(msg, r) {
						rule = r
					}
				}
				if rule == "" {
					t.Fatalf("refused by a rule this test does not know: %q", msg)
				}
				rules = append(rules, rule)
			}
			slices.Sort(rules)
			want := slices.Sorted(slices.Values(c.refused))
			if !slices.Equal(rules, want) {
				t.Errorf("refused by (-want +got):\n-%q\n+%q", want, rules)
			}
		})
	}
}

// mergeYAML is the YAML document base with patch merged in: a map merges
// key by key, any other value (a list included) replaces, and null
// removes (RFC 7386's JSON merge patch).
func mergeYAML(t *testing.T, base, patch string) map[string]any {
	t.Helper()
	var b, p map[string]any
	if err := yaml.Unmarshal([]byte(base), &b); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(patch), &p); err != nil {
		t.Fatalf("patch %s: %v", patch, err)
	}
	return mergeMaps(b, p)
}

func mergeMaps(base, patch map[string]any) map[string]any {
	out := maps.Clone(base)
	if out == nil {
		out = map[string]any{}
	}
	for k, v := range patch {
		pm, ok := v.(map[string]any)
		bm, bok := out[k].(map[string]any)
		switch {
		case v == nil:
			delete(out, k)
		case ok && bok:
			out[k] = mergeMaps(bm, pm)
		default:
			out[k] = v
		}
	}
	return out
}

// podFromYAML decodes an unstructured pod strictly into a corev1.Pod: a
// field the API does not have fails the test rather than being ignored.
func podFromYAML(t *testing.T, m map[string]any) *corev1.Pod {
	t.Helper()
	b, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(b, &pod); err != nil {
		t.Fatalf("hostile pod: %v\n%s", err, b)
	}
	return &pod
}

// TestPolicyMatchesEphemeralContainers: the policy is evaluated for pod
// creation and update and for kubectl debug's update of the
// pods/ephemeralcontainers subresource; without the latter an ephemeral
// container would be admitted unseen.
func TestPolicyMatchesEphemeralContainers(t *testing.T) {
	p, _ := tenantPolicy(t)
	for _, c := range []struct{ sub, op string }{{"", "CREATE"}, {"", "UPDATE"}, {"ephemeralcontainers", "UPDATE"}} {
		if !p.matches("pods", c.sub, c.op) {
			t.Errorf("the policy does not match %s of pods/%s", c.op, c.sub)
		}
	}
}
