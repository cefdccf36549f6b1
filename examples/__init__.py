"""Example models and sharding plans for commlens.

Every model factory returns ``(model, example_args)`` (or ``(model, args,
kwargs)``) and is addressed on the command line as ``examples.mlp:mlp`` or
``examples.gpt2:gpt2(n_layers=4)``.  Plan factories live in
``examples.plans`` and return a :class:`commlens.plan.Plan`.
"""
