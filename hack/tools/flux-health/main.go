// flux-health prints how Flux's kustomize-controller judges the health of
// objects: kstatus's generic rules (sigs.k8s.io/cli-utils, and Flux's fork
// of it that the controller runs), and, for a kind that the Kustomization
// lists in spec.healthCheckExprs, Flux's own CEL evaluator
// (github.com/fluxcd/pkg/runtime/cel). Built by hack/build-flux-health.sh at
// the versions of hack/versions.env; tests/examples.rs runs it.
//
//	flux-health KUSTOMIZATION.yaml < LIST.json
//
// LIST.json is a List (`kubectl get -o json`). One JSON line per item:
// {"name", "kstatus", "fluxKstatus", "exprs"}; exprs is "" for a kind the
// Kustomization has no expressions for, "error: ..." when they fail to
// evaluate (the controller then reports the object Unknown and waits).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	fluxstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/runtime/cel"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type verdict struct {
	Name        string `json:"name"`
	Kstatus     string `json:"kstatus"`
	FluxKstatus string `json:"fluxKstatus"`
	Exprs       string `json:"exprs"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: flux-health KUSTOMIZATION.yaml < LIST.json")
		os.Exit(2)
	}
	evaluators, err := evaluatorsOf(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "flux-health:", err)
		os.Exit(1)
	}
	var list unstructured.UnstructuredList
	in, err := io.ReadAll(os.Stdin)
	if err == nil {
		err = list.UnmarshalJSON(in)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "flux-health: reading the List on stdin:", err)
		os.Exit(1)
	}
	out := json.NewEncoder(os.Stdout)
	for i := range list.Items {
		u := &list.Items[i]
		v := verdict{Name: u.GetName()}
		v.Kstatus = computed(status.Compute(u))
		r, err := fluxstatus.Compute(u)
		if err != nil {
			v.FluxKstatus = "error: " + err.Error()
		} else {
			v.FluxKstatus = string(r.Status)
		}
		if e, ok := evaluators[u.GroupVersionKind().GroupKind()]; ok {
			r, err := e.Evaluate(context.Background(), u)
			if err != nil {
				v.Exprs = "error: " + err.Error()
			} else {
				v.Exprs = string(r.Status)
			}
		}
		if err := out.Encode(v); err != nil {
			fmt.Fprintln(os.Stderr, "flux-health:", err)
			os.Exit(1)
		}
	}
}

func computed(r *status.Result, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return string(r.Status)
}

// evaluatorsOf reads the first Kustomization of a YAML file and builds
// Flux's evaluator for each of its healthCheckExprs, by group and kind (as
// the controller matches them).
func evaluatorsOf(path string) (map[schema.GroupKind]*cel.StatusEvaluator, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var k kustomizev1.Kustomization
		if err := dec.Decode(&k); err != nil {
			if err == io.EOF {
				return nil, fmt.Errorf("%s holds no Kustomization", path)
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if k.Kind != kustomizev1.KustomizationKind {
			continue
		}
		m := map[schema.GroupKind]*cel.StatusEvaluator{}
		for _, hc := range k.Spec.HealthCheckExprs {
			gv, err := schema.ParseGroupVersion(hc.APIVersion)
			if err != nil {
				return nil, fmt.Errorf("healthCheckExprs %s: %w", hc.APIVersion, err)
			}
			e, err := cel.NewStatusEvaluator(&hc.HealthCheckExpressions)
			if err != nil {
				return nil, fmt.Errorf("healthCheckExprs %s/%s: %w", hc.APIVersion, hc.Kind, err)
			}
			m[schema.GroupKind{Group: gv.Group, Kind: hc.Kind}] = e
		}
		return m, nil
	}
}
