"""Model configs: how a ``config.json`` (transformers, diffusers) gives a spec, read as the
model's own code reads it. config.py is the shared reading, registry.py the model types and their
records (rope and ALiBi; fixed.py's records for buckets.py and sinusoidal.py; vision.py), zoo.json
the generated facts of the rest of transformers' rotary models. Imports only the math core.
"""
