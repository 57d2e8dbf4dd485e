"""What a load run sends: the scenario (scenario.py), the request kinds (payloads.py), the realistic
mix (mix.py), and the locust users that send them (locustfile.py, grpc_user.py)."""
