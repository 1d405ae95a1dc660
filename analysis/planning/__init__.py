"""Planning a release before any vote: the least noise for a budget, the headline target on
a public vote model, what a release is expected to cost, and round 2's plan."""
