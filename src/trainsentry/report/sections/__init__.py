"""One module per report section, in reading order. Each has TITLE, INPUTS (keys of
``report.inputs.INPUTS``) and ``render(ctx, figs) -> html``."""

from . import (s1_problem, s2_monitor, s3_benign, s4_flops, s5_redteam, s6_ranking, s7_scale,
               s8_recommendations, s9_limitations)

SECTIONS = (s1_problem, s2_monitor, s3_benign, s4_flops, s5_redteam, s6_ranking, s7_scale,
            s8_recommendations, s9_limitations)
