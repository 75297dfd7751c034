        env:
        - name: "DCGM_EXPORTER_KUBERNETES"
          value: "true"
        {{- if .Values.kubernetes.enablePodLabels }}
        - name: "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS"
          value: "true"
        {{- end }}
        {{- if .Values.kubernetes.enablePodUID }}
        - name: "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID"
          value: "true"
        {{- end }}
        {{- if .Values.kubernetes.podLabelAllowlistRegex }}
        - name: "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX"
          value: {{ .Values.kubernetes.podLabelAllowlistRegex | join "," | quote }}
        {{- end }}
        - name: "DCGM_EXPORTER_LISTEN"
          value: "{{ .Values.service.address }}"
        - name: NODE_NAME
          valueFrom:
            fieldRef:
              fieldPath: spec.nodeName
        {{- if or .Values.tlsServerConfig.enabled $.Values.basicAuth.users}}
        - name: "DCGM_EXPORTER_WEB_CONFIG_FILE"
          value: /etc/dcgm-exporter/web-config.yaml
        {{- end }}
        {{- if .Values.kubernetesDRA.enabled }}
        - name: "KUBERNETES_ENABLE_DRA"
          value: "true"
        {{- end }}
        {{- if .Values.extraEnv }}
        {{- toYaml .Values.extraEnv | nindent 8 }}
        {{- end }}
