{{/* The chart's name, or nameOverride. */}}
{{- define "spine.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's resource name: fullnameOverride, else release-chart (the release alone when it contains the chart's name). */}}
{{- define "spine.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "spine.selectorLabels" -}}
app.kubernetes.io/name: {{ include "spine.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "spine.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "spine.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "spine.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "spine.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* "true" on PostgreSQL (database.existingSecret set), "" embedded. */}}
{{- define "spine.postgres" -}}
{{- if .Values.database.existingSecret -}}true{{- end -}}
{{- end -}}

{{/* The pods a fixed-size workload runs: replicaCount, else 1 embedded and 2 on PostgreSQL. */}}
{{- define "spine.replicas" -}}
{{- if kindIs "invalid" .Values.replicaCount -}}
{{- if include "spine.postgres" . -}}2{{- else -}}1{{- end -}}
{{- else -}}
{{- int .Values.replicaCount -}}
{{- end -}}
{{- end -}}

{{/*
The rules `spine serve` enforces, checked at render time so a bad release never starts:
an auth choice beyond loopback, one writer node on the embedded store. Included once, by
service.yaml, which every release renders.
*/}}
{{- define "spine.validate" -}}
{{- if and (not .Values.oidc.issuer) (not .Values.allowUnauthenticated) -}}
{{- fail "spine: set oidc.issuer and oidc.audience (OIDC bearer tokens on every call), or allowUnauthenticated=true when a trusted network or proxy guards Spine: it listens beyond loopback and refuses to start with neither" -}}
{{- end -}}
{{- if and .Values.oidc.issuer (not .Values.oidc.audience) -}}
{{- fail "spine: oidc.audience is required with oidc.issuer (the audience tokens must carry)" -}}
{{- end -}}
{{- if and .Values.oidc.audience (not .Values.oidc.issuer) -}}
{{- fail "spine: oidc.issuer is required with oidc.audience" -}}
{{- end -}}
{{- if not (include "spine.postgres" .) -}}
{{- if gt (int (include "spine.replicas" .)) 1 -}}
{{- fail (printf "spine: replicaCount=%s needs PostgreSQL: the embedded store is one SQLite file with one writer node, so embedded mode runs exactly 1 replica (set database.existingSecret for several nodes)" (include "spine.replicas" .)) -}}
{{- end -}}
{{- if .Values.autoscaling.enabled -}}
{{- fail "spine: autoscaling.enabled needs PostgreSQL: the embedded store runs exactly 1 replica (set database.existingSecret)" -}}
{{- end -}}
{{- else if not .Values.database.secretKey -}}
{{- fail "spine: database.secretKey must name the key of database.existingSecret holding the PostgreSQL URL" -}}
{{- end -}}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) -}}
{{- fail "spine: autoscaling.minReplicas must not exceed autoscaling.maxReplicas" -}}
{{- end -}}
{{- end -}}

{{/* The Host header values accepted: the Service's DNS names, the ingress hosts, allowedHosts. */}}
{{- define "spine.allowedHosts" -}}
{{- $name := include "spine.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $hosts := list $name (printf "%s.%s" $name $ns) (printf "%s.%s.svc" $name $ns) (printf "%s.%s.svc.%s" $name $ns .Values.clusterDomain) -}}
{{- if .Values.ingress.enabled -}}
{{- range .Values.ingress.hosts -}}
{{- $hosts = append $hosts .host -}}
{{- end -}}
{{- end -}}
{{- $hosts = concat $hosts .Values.allowedHosts -}}
{{- join "," (uniq $hosts) -}}
{{- end -}}

{{/* The pod template both workloads share. */}}
{{- define "spine.podTemplate" -}}
metadata:
  labels:
    {{- include "spine.selectorLabels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  serviceAccountName: {{ include "spine.serviceAccountName" . }}
  automountServiceAccountToken: false
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
  containers:
    - name: spine
      image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args:
        - serve
        {{- if include "spine.postgres" . }}
        - --stateless
        {{- end }}
      env:
        - name: SPINE_LISTEN
          value: "0.0.0.0:8080"
        - name: SPINE_METRICS_LISTEN
          value: "0.0.0.0:{{ .Values.metrics.port }}"
        - name: SPINE_ALLOWED_HOSTS
          value: {{ include "spine.allowedHosts" . | quote }}
        {{- with .Values.allowedOrigins }}
        - name: SPINE_ALLOWED_ORIGINS
          value: {{ join "," . | quote }}
        {{- end }}
        {{- if include "spine.postgres" . }}
        - name: SPINE_DATABASE_URL
          valueFrom:
            secretKeyRef:
              name: {{ .Values.database.existingSecret }}
              key: {{ .Values.database.secretKey }}
        {{- else }}
        - name: SPINE_DATA_DIR
          value: /data
        {{- end }}
        {{- if .Values.oidc.issuer }}
        - name: SPINE_OIDC_ISSUER
          value: {{ .Values.oidc.issuer | quote }}
        - name: SPINE_OIDC_AUDIENCE
          value: {{ .Values.oidc.audience | quote }}
        - name: SPINE_OWNER_CLAIM
          value: {{ .Values.oidc.ownerClaim | quote }}
        {{- with .Values.oidc.consoleClientId }}
        - name: SPINE_CONSOLE_CLIENT_ID
          value: {{ . | quote }}
        {{- end }}
        {{- end }}
        {{- if .Values.allowUnauthenticated }}
        - name: SPINE_ALLOW_UNAUTHENTICATED
          value: "true"
        {{- end }}
        {{- with .Values.otel }}
        {{- if .endpoint }}
        - name: SPINE_POD_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        - name: SPINE_POD_NAMESPACE
          valueFrom:
            fieldRef:
              fieldPath: metadata.namespace
        - name: SPINE_NODE_NAME
          valueFrom:
            fieldRef:
              fieldPath: spec.nodeName
        - name: OTEL_EXPORTER_OTLP_ENDPOINT
          value: {{ .endpoint | quote }}
        - name: OTEL_EXPORTER_OTLP_PROTOCOL
          value: {{ .protocol | quote }}
        - name: OTEL_SERVICE_NAME
          value: {{ .serviceName | quote }}
        - name: OTEL_RESOURCE_ATTRIBUTES
          value: "k8s.pod.name=$(SPINE_POD_NAME),k8s.namespace.name=$(SPINE_POD_NAMESPACE),k8s.node.name=$(SPINE_NODE_NAME),service.instance.id=$(SPINE_POD_NAME)
            {{- range $k, $v := .resourceAttributes }},{{ $k }}={{ $v }}{{ end }}"
        {{- end }}
        {{- end }}
        {{- with .Values.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        - name: http
          containerPort: 8080
          protocol: TCP
        - name: metrics
          containerPort: {{ .Values.metrics.port }}
          protocol: TCP
      startupProbe:
        httpGet:
          path: /readyz
          port: http
        periodSeconds: {{ .Values.probes.startup.periodSeconds }}
        failureThreshold: {{ .Values.probes.startup.failureThreshold }}
      livenessProbe:
        httpGet:
          path: /healthz
          port: http
        periodSeconds: {{ .Values.probes.liveness.periodSeconds }}
        failureThreshold: {{ .Values.probes.liveness.failureThreshold }}
      readinessProbe:
        httpGet:
          path: /readyz
          port: http
        periodSeconds: {{ .Values.probes.readiness.periodSeconds }}
        failureThreshold: {{ .Values.probes.readiness.failureThreshold }}
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      {{- if not (include "spine.postgres" .) }}
      volumeMounts:
        - name: data
          mountPath: /data
      {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
