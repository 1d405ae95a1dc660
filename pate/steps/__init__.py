"""The steps of the pipeline, one module per command: `teachers` (``pate train-teachers``),
`label` (``pate label``), `student` (``pate train-student``), `analyze` (``pate analyze``),
`dpsgd` (``pate dpsgd``, the DP-SGD baseline) and `pipeline` (``pate run``, all of them in
order). They share the machinery one level up (`pate.data`, `pate.programs.models`, `pate.programs.voting`,
`pate.store.rundir`, ...), which never imports a step; `pate` exports their entry points.
"""
