{{/*
Adapts one alerting rule of files/alerts.yaml in place (dicts are shared, the
output is empty): prometheusRule.alerts.<name> (severity, for, thresholds,
additionalRuleLabels), prometheusRule.additionalRuleLabels and
prometheusRule.runbookBaseUrl. Argument: dict rule, o (the alert's overrides),
pr (.Values.prometheusRule).
*/}}
{{- define "webchecker-operator.adaptAlert" -}}
{{- $r := .rule }}
{{- $o := .o }}
{{- $name := $r.alert }}
{{- if hasKey $o "for" }}
{{- $_ := set $r "for" $o.for }}
{{- end }}
{{- $labels := $r.labels | default dict }}
{{- if $o.severity }}
{{- $cur := toString (get $labels "severity") }}
{{- if contains "$labels" $cur }}
{{- /* A severity taken from a series label, with a default: only the default changes. */}}
{{- $_ := set $labels "severity" (regexReplaceAllLiteral "\"[^\"]*\" *}}$" $cur (printf "%s }}" (quote $o.severity))) }}
{{- else }}
{{- $_ := set $labels "severity" $o.severity }}
{{- end }}
{{- end }}
{{- /* The rule's own labels win over per-alert ones, which win over the chart-wide ones. */}}
{{- $merged := merge (dict) $labels ($o.additionalRuleLabels | default dict) (.pr.additionalRuleLabels | default dict) }}
{{- if $merged }}
{{- $_ := set $r "labels" $merged }}
{{- end }}
{{- $annotations := $r.annotations | default dict }}
{{- range $key, $value := ($o.thresholds | default dict) }}
{{- $marker := printf "# threshold: %s" $key }}
{{- $line := regexFind (printf "(?m)^.*%s *$" $marker) $r.expr }}
{{- if not $line }}
{{- $known := list }}
{{- range (regexFindAll "# threshold: [A-Za-z0-9]+" $r.expr -1) }}
{{- $known = append $known (trimPrefix "# threshold: " .) }}
{{- end }}
{{- fail (printf "prometheusRule.alerts.%s.thresholds.%s: %s has no such threshold (it has: %s)" $name $key $name (default "none" (join ", " $known))) }}
{{- end }}
{{- $cmp := regexFind "(<=|>=|==|!=|<|>) *[0-9][0-9.]*" $line }}
{{- if not $cmp }}
{{- fail (printf "files/alerts.yaml: %s: no comparison with a number on the line of %q" $name $marker) }}
{{- end }}
{{- $old := regexReplaceAll "^(<=|>=|==|!=|<|>) *" $cmp "" }}
{{- $op := trimSuffix $old $cmp }}
{{- $new := toString $value }}
{{- $_ := set $r "expr" (replace $line (replace $cmp (printf "%s%s" $op $new) $line) $r.expr) }}
{{- /* "threshold <old>" in the annotations: through a placeholder, so that one
new value equal to another threshold's old one is not replaced twice. */}}
{{- range $ak, $av := $annotations }}
{{- $_ := set $annotations $ak (replace (printf "threshold %s" $old) (printf "threshold @@%s@@" $key) $av) }}
{{- end }}
{{- end }}
{{- range $key, $value := ($o.thresholds | default dict) }}
{{- range $ak, $av := $annotations }}
{{- $_ := set $annotations $ak (replace (printf "@@%s@@" $key) (toString $value) $av) }}
{{- end }}
{{- end }}
{{- with $annotations.runbook_url }}
{{- $_ := set $annotations "runbook_url" (printf "%s%s" $.pr.runbookBaseUrl (regexFind "#.*$" .)) }}
{{- end }}
{{- end }}
