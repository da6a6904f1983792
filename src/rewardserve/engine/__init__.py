"""The engine: what schedules and runs the work a request makes.

Below the service (which speaks HTTP) and above the models (which say, as plans, what
work a request makes): the executor runs a plan (units on a model's batcher, calls in the
rule pools, parts on other models), the batcher and its work queue form batches, the
registry holds the served models (and a request's hold on one), the scheduler and the
tenants' books share all of it fairly, the request scope carries a request's deadline
and cancellation, and the rule pools run rule and code calls in worker processes.

It imports the models' contract (models/plan.py, reward_model.py), never a concrete
kind: what builds a model, wakes a sleeping one and watches a canary is handed to it by
service/app.py.
"""
