"""Model layers, families and the registry by HF architecture name."""
