"""The one model interface every agent implements, and the agents that need no model API.

`model`: requests, responses and the `Model` protocol (scripted agents and hosted providers alike);
`scripted`: the generic offline agents (oracle, naive) and the helpers suites write their own with;
`text_protocol`: the paper's ``<tool_call>`` text protocol around any model (``text:MODEL``).
"""
