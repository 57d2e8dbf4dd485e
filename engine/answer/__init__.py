"""The answer pipeline (pipeline.py): parse -> check -> plan -> arrays, for one request, with or
without shared memory. Above the math core and the model configs (a request may name a model's
config); below the readers and the engine process.
"""
