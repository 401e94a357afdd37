"""The capacity report and its renderings (a consumer of the verdict layer).

- ``capacity``: the catalogue on one machine — tiers, bottleneck ranking, serving capacity, big
  loads, links and network, the scale-out verdict;
- ``compare``: the same catalogue on several machines, with prices;
- ``render``: terminal / Markdown / HTML;
- ``model_summary``: what ``nodeledger model show`` prints.

Never prints, never exits.
"""
