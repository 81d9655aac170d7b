// Package kubernetes_test checks the manifests in this directory against
// the Kubernetes API types: every YAML document decodes strictly (an
// unknown or misspelt field fails) into the type its apiVersion and kind
// name, and the properties the engine depends on hold. No cluster runs
// them here.
package kubernetes_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// NetworkAttachmentDefinition is Multus' CRD (k8s.cni.cncf.io/v1), which
// k8s.io/api does not have: its whole schema is metadata and spec.config,
// a CNI configuration as a JSON string.
type NetworkAttachmentDefinition struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Config string `json:"config"`
	} `json:"spec"`
}

// newObject returns the typed object a document's apiVersion and kind
// name, or nil for a kind this test does not know.
func newObject(tm metav1.TypeMeta) any {
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Namespace":
		return &corev1.Namespace{}
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}
	case "apps/v1 DaemonSet":
		return &appsv1.DaemonSet{}
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}
	case "scheduling.k8s.io/v1 PriorityClass":
		return &schedulingv1.PriorityClass{}
	case "admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy":
		return &admissionv1.ValidatingAdmissionPolicy{}
	case "admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding":
		return &admissionv1.ValidatingAdmissionPolicyBinding{}
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}
	case "k8s.cni.cncf.io/v1 NetworkAttachmentDefinition":
		return &NetworkAttachmentDefinition{}
	}
	return nil
}

// decodeAll decodes every document of one manifest strictly.
func decodeAll(name string, data []byte) ([]any, error) {
	var objs []any
	for i, doc := range splitDocuments(data) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		obj := newObject(tm)
		if obj == nil {
			return nil, fmt.Errorf("%s: document %d: unknown apiVersion %q kind %q", name, i, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: document %d (%s): %w", name, i, tm.Kind, err)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// splitDocuments splits a YAML stream at its "---" lines, dropping
// documents that hold only comments.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		for _, l := range strings.Split(cur.String(), "\n") {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
				docs = append(docs, bytes.Clone(cur.Bytes()))
				break
			}
		}
		cur.Reset()
	}
	for _, l := range strings.SplitAfter(string(data), "\n") {
		if strings.TrimRight(l, "\n") == "---" {
			flush()
			continue
		}
		cur.WriteString(l)
	}
	flush()
	return docs
}

// manifests decodes every manifest of this directory.
func manifests(t *testing.T) []any {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var all []any
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeAll(f, data)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, objs...)
	}
	return all
}

func find[T any](t *testing.T, objs []any) []*T {
	t.Helper()
	var out []*T
	for _, o := range objs {
		if v, ok := o.(*T); ok {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		var zero T
		t.Fatalf("no %T in the manifests", zero)
	}
	return out
}

func TestManifestsDecodeStrictly(t *testing.T) {
	objs := manifests(t)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[fmt.Sprintf("%T", o)]++
	}
	for _, want := range []string{"*v1.DaemonSet", "*v1.Deployment", "*v1.ConfigMap", "*v1.NetworkPolicy", "*kubernetes_test.NetworkAttachmentDefinition"} {
		if kinds[want] == 0 {
			t.Errorf("no %s among %v", want, kinds)
		}
	}
}

// TestUnknownFieldRejected proves the decoding strict: one misspelt or
// invented field anywhere in a manifest fails it.
func TestUnknownFieldRejected(t *testing.T) {
	data, err := os.ReadFile("rmad-daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeAll("rmad-daemonset.yaml", data); err != nil {
		t.Fatalf("the manifest itself: %v", err)
	}
	for _, c := range []struct{ why, old, new string }{
		{"misspelt pod field", "terminationGracePeriodSeconds:", "terminationGracePeriodSecond:"},
		{"field hostPath lacks", "path: /var/lib/onerma\n", "path: /var/lib/onerma\n            readOnly: false\n"},
		{"invented spec field", "  updateStrategy:", "  bogus: 1\n  updateStrategy:"},
		{"misspelt resources key", "            limits:\n              cpu: \"2\"", "            limit:\n              cpu: \"2\""},
	} {
		bad := strings.Replace(string(data), c.old, c.new, 1)
		if bad == string(data) {
			t.Fatalf("%s: %q matched nothing", c.why, c.old)
		}
		if _, err := decodeAll("edited", []byte(bad)); err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s: err = %v, want an unknown field", c.why, err)
		}
	}
	nad := "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {name: x}\nspec: {config: '{}', cfg: 1}\n"
	if _, err := decodeAll("nad", []byte(nad)); err == nil {
		t.Error("a NetworkAttachmentDefinition with an unknown spec field decoded")
	}
	if _, err := decodeAll("kind", []byte("apiVersion: v1\nkind: Secret\nmetadata: {name: x}\n")); err == nil {
		t.Error("a kind the test does not know was accepted")
	}
}

// guaranteed checks a pod is Guaranteed QoS as the kubelet decides it
// (every container has CPU and memory limits and every request equals its
// limit, huge pages included) with whole CPUs, which the static CPU
// manager pins exclusively.
func guaranteed(t *testing.T, what string, spec *corev1.PodSpec) {
	t.Helper()
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		r := c.Resources
		for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, "hugepages-2Mi"} {
			if _, ok := r.Limits[n]; !ok {
				t.Errorf("%s/%s: no %s limit", what, c.Name, n)
			}
		}
		if len(r.Requests) != len(r.Limits) {
			t.Errorf("%s/%s: requests %v and limits %v name different resources", what, c.Name, r.Requests, r.Limits)
		}
		for n, l := range r.Limits {
			if q, ok := r.Requests[n]; !ok || q.Cmp(l) != 0 {
				t.Errorf("%s/%s: %s request %v, limit %v: not Guaranteed", what, c.Name, n, r.Requests[n], l)
			}
		}
		if cpu := r.Limits[corev1.ResourceCPU]; cpu.MilliValue()%1000 != 0 {
			t.Errorf("%s/%s: %v CPUs: the static CPU manager pins whole CPUs only", what, c.Name, cpu.String())
		}
	}
}

func volume(spec *corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

func mountOf(c *corev1.Container, path string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == path {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

// hostPathAt is the host path mounted at path in c, or "".
func hostPathAt(spec *corev1.PodSpec, c *corev1.Container, path string) string {
	m := mountOf(c, path)
	if m == nil {
		return ""
	}
	v := volume(spec, m.Name)
	if v == nil || v.HostPath == nil {
		return ""
	}
	return v.HostPath.Path
}

// deviceEnv is the variable the SR-IOV network device plugin sets to the
// PCI addresses of the devices of a resource: PCIDEVICE_ and the resource
// name in upper case, "." and "/" turned to "_".
func deviceEnv(resourceName string) string {
	return "PCIDEVICE_" + strings.ToUpper(strings.NewReplacer(".", "_", "/", "_").Replace(resourceName))
}
