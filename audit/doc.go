// Package audit finds dtype problems in a graph built under a mixed-precision policy: 16-bit
// reductions, float32 parameters used uncast in 16-bit regions and float32 detours between 16-bit
// ops (Graph); compute dtypes that differ from the policy's (ComputeDTypes) and variables whose
// dtype differs from the policy's parameter dtype (Variables). GroupFindings groups the findings
// of repeated blocks.
//
//	findings := audit.Graph(p.Graph, p.Outputs)
//	for _, g := range audit.GroupFindings(findings) { fmt.Println(g) }
package audit
