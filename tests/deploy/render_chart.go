// render_chart renders a Helm chart the way `helm template` does, for the
// parts of Helm that deploy/helm/halo uses, with only Debian 12 packages
// (golang-go, golang-github-masterminds-sprig-dev, golang-gopkg-yaml.v3-dev):
// Helm is not packaged in Debian, and its templates are Go text/template with
// sprig's functions plus a few of Helm's own.
//
//	GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=$(mktemp -d) \
//	  go run render_chart.go CHART_DIR [-f values.yaml]... [--set k=v]... \
//	  [--name RELEASE] [--namespace NS] [--notes]
//
// What it implements, as Helm 3 does:
//   - .Values: values.yaml, then each -f file, then each --set, deep-merged
//     (a null removes a key). YAML numbers become float64, as Helm's
//     YAML-via-JSON loading makes them; --set integers are int64, true/false
//     bools, null nil, as Helm's strvals parser types them. --set takes
//     a.b=v, a[0]=v, a={x,y} and comma-separated assignments.
//   - .Release (Name, Namespace, Service "Helm", IsInstall true, Revision 1),
//     .Chart (Name, Version, AppVersion, Description, Type), .Template
//     (Name, BasePath), .Capabilities.KubeVersion.
//   - sprig's TxtFuncMap without env and expandenv (Helm removes them too),
//     plus include, tpl, required, toYaml, fromYaml, toJson, lookup (empty).
//   - Every file under templates/ is parsed into one template set; files
//     whose name starts with _ only define partials; NOTES.txt is rendered
//     (to stderr with --notes) but not part of the manifests.
//   - missingkey=zero, and "<no value>" removed from the output.
//
// Output: the multi-document YAML, each document preceded by
// "# Source: CHART/templates/FILE", in file name order.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/template"

	sprig "github.com/Masterminds/sprig"
	yaml "gopkg.in/yaml.v3"
)

type options struct {
	chartDir    string
	valueFiles  []string
	sets        []string
	releaseName string
	namespace   string
	notes       bool
}

func parseArgs(args []string) (options, error) {
	o := options{releaseName: "release-name", namespace: "default"}
	next := func(i *int, flag string) (string, error) {
		if *i+1 >= len(args) {
			return "", fmt.Errorf("%s needs a value", flag)
		}
		*i++
		return args[*i], nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		var err error
		var v string
		switch {
		case a == "-f" || a == "--values":
			v, err = next(&i, a)
			o.valueFiles = append(o.valueFiles, v)
		case strings.HasPrefix(a, "--values="):
			o.valueFiles = append(o.valueFiles, strings.TrimPrefix(a, "--values="))
		case a == "--set":
			v, err = next(&i, a)
			o.sets = append(o.sets, v)
		case strings.HasPrefix(a, "--set="):
			o.sets = append(o.sets, strings.TrimPrefix(a, "--set="))
		case a == "--name":
			o.releaseName, err = next(&i, a)
		case a == "--namespace" || a == "-n":
			o.namespace, err = next(&i, a)
		case a == "--notes":
			o.notes = true
		case strings.HasPrefix(a, "-"):
			err = fmt.Errorf("unknown option %s", a)
		default:
			if o.chartDir != "" {
				err = fmt.Errorf("one chart directory only (got %s and %s)", o.chartDir, a)
			}
			o.chartDir = a
		}
		if err != nil {
			return o, err
		}
	}
	if o.chartDir == "" {
		return o, errors.New("usage: render_chart CHART_DIR [-f values.yaml]... [--set k=v]... [--name R] [--namespace NS] [--notes]")
	}
	return o, nil
}

// loadYAMLValues reads YAML as Helm does: through JSON, so every number is a
// float64 and every mapping a map[string]interface{}.
func loadYAMLValues(path string) (map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var raw interface{}
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if raw == nil {
		return map[string]interface{}{}, nil
	}
	j, err := json.Marshal(jsonable(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	var out map[string]interface{}
	if err := json.Unmarshal(j, &out); err != nil {
		return nil, fmt.Errorf("%s: the top level must be a mapping: %v", path, err)
	}
	return out, nil
}

// jsonable turns the map[interface{}]interface{} a YAML decoder may produce
// into string-keyed maps that encoding/json accepts.
func jsonable(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		for k, x := range t {
			t[k] = jsonable(x)
		}
		return t
	case map[interface{}]interface{}:
		m := make(map[string]interface{}, len(t))
		for k, x := range t {
			m[fmt.Sprint(k)] = jsonable(x)
		}
		return m
	case []interface{}:
		for i, x := range t {
			t[i] = jsonable(x)
		}
		return t
	}
	return v
}

// mergeValues merges src into dst, src winning; maps merge key by key and a
// nil in src deletes the key, as Helm's coalescing of user values does.
func mergeValues(dst, src map[string]interface{}) {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
			continue
		}
		sm, sok := v.(map[string]interface{})
		dm, dok := dst[k].(map[string]interface{})
		if sok && dok {
			mergeValues(dm, sm)
		} else {
			dst[k] = v
		}
	}
}

// typedVal types a --set value as Helm's strvals does.
func typedVal(s string) interface{} {
	switch {
	case strings.EqualFold(s, "true"):
		return true
	case strings.EqualFold(s, "false"):
		return false
	case strings.EqualFold(s, "null"):
		return nil
	case s == "0":
		return int64(0)
	case len(s) > 1 && s[0] == '0':
		return s // leading zeros stay a string
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	return s
}

// splitUnescaped splits s on sep outside {...}, honouring backslash escapes.
func splitUnescaped(s string, sep byte) []string {
	var parts []string
	var cur strings.Builder
	depth := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			cur.WriteByte(c)
			cur.WriteByte(s[i+1])
			i++
		case c == '{':
			depth++
			cur.WriteByte(c)
		case c == '}':
			depth--
			cur.WriteByte(c)
		case c == sep && depth == 0:
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	return append(parts, cur.String())
}

func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// applySet applies one --set argument (possibly several comma-separated
// assignments) to vals.
func applySet(vals map[string]interface{}, arg string) error {
	for _, assign := range splitUnescaped(arg, ',') {
		if assign == "" {
			continue
		}
		eq := strings.IndexByte(assign, '=')
		if eq <= 0 {
			return fmt.Errorf("--set %q: expected key=value", assign)
		}
		key, raw := assign[:eq], assign[eq+1:]
		var val interface{}
		if strings.HasPrefix(raw, "{") && strings.HasSuffix(raw, "}") {
			list := []interface{}{}
			if inner := raw[1 : len(raw)-1]; inner != "" {
				for _, item := range splitUnescaped(inner, ',') {
					list = append(list, typedVal(unescape(item)))
				}
			}
			val = list
		} else {
			val = typedVal(unescape(raw))
		}
		if err := setPath(vals, splitUnescaped(key, '.'), val); err != nil {
			return fmt.Errorf("--set %q: %v", assign, err)
		}
	}
	return nil
}

func setPath(m map[string]interface{}, path []string, val interface{}) error {
	seg := unescape(path[0])
	name, index := seg, -1
	if lb := strings.IndexByte(seg, '['); lb >= 0 && strings.HasSuffix(seg, "]") {
		n, err := strconv.Atoi(seg[lb+1 : len(seg)-1])
		if err != nil || n < 0 {
			return fmt.Errorf("bad list index in %q", seg)
		}
		name, index = seg[:lb], n
	}
	last := len(path) == 1
	if index < 0 {
		if last {
			if val == nil {
				delete(m, name)
			} else {
				m[name] = val
			}
			return nil
		}
		sub, ok := m[name].(map[string]interface{})
		if !ok {
			sub = map[string]interface{}{}
			m[name] = sub
		}
		return setPath(sub, path[1:], val)
	}
	list, _ := m[name].([]interface{})
	for len(list) <= index {
		list = append(list, nil)
	}
	if last {
		list[index] = val
	} else {
		sub, ok := list[index].(map[string]interface{})
		if !ok {
			sub = map[string]interface{}{}
			list[index] = sub
		}
		if err := setPath(sub, path[1:], val); err != nil {
			return err
		}
	}
	m[name] = list
	return nil
}

// toYAML is Helm's toYaml: block style, two-space indent, no final newline.
func toYAML(v interface{}) (string, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	if err := enc.Close(); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

type kubeVersion struct{ Version, Major, Minor string }

type apiVersions []string

// Has reports whether an API version is available; the renderer knows none,
// as `helm template` without --api-versions.
func (a apiVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

type capabilities struct {
	KubeVersion kubeVersion
	APIVersions apiVersions
}

func run(o options) error {
	chartDir := filepath.Clean(o.chartDir)
	chartMeta, err := loadYAMLValues(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		return err
	}
	str := func(k string) string {
		if v, ok := chartMeta[k]; ok && v != nil {
			return fmt.Sprint(v)
		}
		return ""
	}
	if str("apiVersion") != "v2" {
		return fmt.Errorf("%s/Chart.yaml: apiVersion must be v2, not %q", chartDir, str("apiVersion"))
	}
	chartName := str("name")
	if chartName == "" || str("version") == "" {
		return fmt.Errorf("%s/Chart.yaml: name and version are required", chartDir)
	}

	values := map[string]interface{}{}
	if _, err := os.Stat(filepath.Join(chartDir, "values.yaml")); err == nil {
		if values, err = loadYAMLValues(filepath.Join(chartDir, "values.yaml")); err != nil {
			return err
		}
	}
	for _, f := range o.valueFiles {
		override, err := loadYAMLValues(f)
		if err != nil {
			return err
		}
		mergeValues(values, override)
	}
	for _, s := range o.sets {
		if err := applySet(values, s); err != nil {
			return err
		}
	}

	top := map[string]interface{}{
		"Values": values,
		"Release": map[string]interface{}{
			"Name": o.releaseName, "Namespace": o.namespace, "Service": "Helm",
			"IsInstall": true, "IsUpgrade": false, "Revision": 1,
		},
		"Chart": map[string]interface{}{
			"Name": chartName, "Version": str("version"), "AppVersion": str("appVersion"),
			"Description": str("description"), "Type": str("type"),
		},
		"Capabilities": capabilities{KubeVersion: kubeVersion{"v1.30.0", "1", "30"}},
	}

	// Every template file, by its Helm name CHART/templates/REL.
	tdir := filepath.Join(chartDir, "templates")
	var names []string
	files := map[string]string{}
	err = filepath.Walk(tdir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(tdir, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		name := chartName + "/templates/" + filepath.ToSlash(rel)
		names = append(names, name)
		files[name] = string(data)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)

	funcs := sprig.TxtFuncMap()
	delete(funcs, "env")
	delete(funcs, "expandenv")
	root := template.New("").Option("missingkey=zero")
	const maxDepth = 100
	depth := 0
	funcs["include"] = func(name string, data interface{}) (string, error) {
		depth++
		defer func() { depth-- }()
		if depth > maxDepth {
			return "", fmt.Errorf("include %q: nested more than %d deep", name, maxDepth)
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return buf.String(), nil
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := root.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", fmt.Errorf("tpl: %v", err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, data); err != nil {
			return "", fmt.Errorf("tpl: %v", err)
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return nil, errors.New(msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return nil, errors.New(msg)
		}
		return v, nil
	}
	funcs["toYaml"] = func(v interface{}) string {
		s, err := toYAML(v)
		if err != nil {
			return "" // Helm's toYaml also swallows the error
		}
		return s
	}
	funcs["mustToYaml"] = toYAML
	funcs["fromYaml"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := yaml.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	funcs["toJson"] = func(v interface{}) string {
		b, err := json.Marshal(v)
		if err != nil {
			return ""
		}
		return string(b)
	}
	funcs["lookup"] = func(apiVersion, kind, namespace, name string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	root.Funcs(funcs)
	for _, name := range names {
		if _, err := root.New(name).Parse(files[name]); err != nil {
			return err
		}
	}

	var out strings.Builder
	for _, name := range names {
		base := filepath.Base(name)
		if strings.HasPrefix(base, "_") {
			continue
		}
		isNotes := base == "NOTES.txt"
		data := map[string]interface{}{}
		for k, v := range top {
			data[k] = v
		}
		data["Template"] = map[string]interface{}{"Name": name, "BasePath": chartName + "/templates"}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, data); err != nil {
			return err
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		if isNotes {
			if o.notes {
				fmt.Fprint(os.Stderr, text)
			}
			continue
		}
		if strings.TrimSpace(text) == "" {
			continue
		}
		if !strings.HasSuffix(base, ".yaml") && !strings.HasSuffix(base, ".yml") && !strings.HasSuffix(base, ".tpl") {
			continue // Helm renders only manifests and partials
		}
		out.WriteString("---\n# Source: " + name + "\n")
		out.WriteString(strings.TrimLeft(text, "\n"))
		if !strings.HasSuffix(text, "\n") {
			out.WriteString("\n")
		}
	}
	_, err = os.Stdout.WriteString(out.String())
	return err
}

func main() {
	o, err := parseArgs(os.Args[1:])
	if err == nil {
		err = run(o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "render_chart:", err)
		os.Exit(1)
	}
}
