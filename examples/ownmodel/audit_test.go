package main

import (
	"testing"

	"github.com/onegpu/onegpu/audit"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/train"
)

// TestAuditOfTheDocumentedModel: the dtype audit of docs/own-model.md's model (this example's ResMLP and
// Setup, bfloat16 compute over float32 parameters) finds nothing. Its loss casts the model's
// output to float32 and compares it with the float32 targets, which is right; the audit reported
// it as an uncast float32 parameter (the targets are a parameter of the graph, not a weight).
func TestAuditOfTheDocumentedModel(t *testing.T) {
	_, config, _ := Setup()
	trainer, err := train.New(testkit.Embedded(), config)
	if err != nil {
		t.Fatal(err)
	}
	defer trainer.Close()
	p, err := trainer.Program()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Graph.Finalize()
	findings := mixed.Audit(trainer.Ctx, p.Graph, p.Outputs)
	for _, g := range audit.GroupFindings(findings) {
		t.Errorf("finding: %s", g)
	}
	if findings := mixed.AuditVariables(trainer.Ctx); len(findings) != 0 {
		t.Errorf("variable findings: %v", findings)
	}
}
