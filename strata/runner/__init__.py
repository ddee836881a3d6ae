"""Executes a StepPlan on the device: builds inputs, runs the forward, samples. Never imports the
scheduler; knows slots only through the plan."""
