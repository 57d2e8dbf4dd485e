"""The service's base: its settings (HTTP and gRPC, over the engine's), its HTTP errors, the bearer
gate and the engine's readiness, which every transport above uses."""
