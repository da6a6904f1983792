"""Code execution in SandboxFusion's shapes: /run_code, /submit, /v1/ping."""
