"""Pure decisions: observed state in, plan out. No I/O, no kopf, no kubernetes client."""
