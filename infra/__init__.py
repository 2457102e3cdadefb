"""CDK app of the deployed auditor: one stack composed of one construct per concern."""
