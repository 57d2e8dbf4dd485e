"""The Open Inference Protocol (KServe v2) over HTTP (``/v2`` on the HTTP port) and gRPC
(``inference.GRPCInferenceService`` on the gRPC port): the families (docs/reference.md) and configured tables as
v2 models, answered through the one pipeline (engine/answer/pipeline.py). docs/kserve.md says how.
"""
