-- name: attention sink
-- aliases: attention sinks, sink heads, attention to the first token, first token attention, streamingllm, xiao figure 2
-- paper: Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks" (StreamingLLM), Figures 2 and 12; sink rate: Gu et al. 2024, "When Attention Sink Emerges in Language Models"
-- description: Per head, the average attention a token gives to the first token of its input (position 0:
--   [CLS] in a BERT-style encoder, the BOS in a decoder that prepends one, else the first word piece):
--   Xiao et al.'s attention sink. Their Figure 2 averages Llama-2-7B's attention maps over 256 inputs and
--   finds every head beyond the two bottom layers attending mostly to the first token; their Figure 12 gives
--   per layer the attention after softmax to the first token, averaged over inputs, with its spread over
--   heads. Their released code (mit-han-lab/streaming-llm) holds the streaming KV cache, not these
--   figures; the averaging here is Clark et al.'s (as 'special tokens'): per input the mean over all its
--   rows (the first token's own row included: in a decoder it sees only itself and gives it 1), then the
--   mean over inputs, each input weighing the same whatever its length. Attention weights after softmax,
--   exact from the dense rows (attn_rows.to_first). first_plain: the same over the inputs whose first
--   token is not a [CLS]/BOS (tokens.role neither 'cls' nor 'bos': a decoder run without BOS, whose sink
--   is then an ordinary word); NULL, with n_plain 0, when every input starts with [CLS]/BOS (any
--   BERT-style encoder, a decoder run with BOS). sink_heads: the share of the row's heads whose mean
--   (first) exceeds threshold, strictly (on a head's row 1 or 0). sink_rate: the share of the row's (input, head)
--   pairs whose per-input mean exceeds threshold: Gu et al.'s Sink_1 metric (their released
--   eval_sink_open_source.py, compute_attention_sink, threshold 0.3, the default here). Rows with head
--   NULL are a layer's (means and shares over its heads), the row with layer NULL too the whole model's.
--   For an encoder these are the numbers of [CLS]; Xiao et al. (Section 13) find BERT-base's sink on
--   [SEP] instead (see 'special tokens', column sep). A run ingested before attn_rows.to_first and
--   tokens.role existed answers as if ingested now: its first token was always [CLS], so the store derives
--   both (to_first from to_cls, the roles from the [CLS]/[SEP] strings).
-- parameters:
--   run [run]: run id (default: the latest run)
--   threshold: a head (an input's head) is a sink when its mean attention to the first token exceeds it (default: 0.3)
-- needs: SELECT ($threshold BETWEEN 0 AND 1)::INTEGER
--   else: $threshold: expected a share from 0 to 1
-- plot: heatmap first sink_rate
-- figure: a layer x head heat map of each of `first`, `sink_rate`
-- labels:
--   first: attention to the first token
--   sink_rate: sink rate (share of inputs)

WITH per_input AS (
    SELECT layer, head, example_id, avg(to_first) AS first
    FROM attn_rows
    WHERE run_id = $run
    GROUP BY layer, head, example_id
),
starts AS (  -- whether each input begins with a [CLS]/BOS
    SELECT example_id, coalesce(role IN ('cls', 'bos'), false) AS special_start
    FROM tokens
    WHERE run_id = $run AND tok_idx = 0
),
heads AS (
    SELECT layer, head,
           avg(first) AS first,
           avg(first) FILTER (WHERE NOT special_start) AS first_plain,
           avg(CAST(first > $threshold AS DOUBLE)) AS sink_rate,
           count(*) AS n_inputs,
           count(*) FILTER (WHERE NOT special_start) AS n_plain
    FROM per_input JOIN starts USING (example_id)
    GROUP BY layer, head
)
SELECT
    layer + 1 AS layer,
    head + 1 AS head,
    avg(first) AS first,
    avg(first_plain) AS first_plain,
    avg(CAST(first > $threshold AS DOUBLE)) AS sink_heads,
    avg(sink_rate) AS sink_rate,
    max(n_inputs) AS n_inputs,
    max(n_plain) AS n_plain
FROM heads
GROUP BY GROUPING SETS ((layer, head), (layer), ())
ORDER BY layer NULLS LAST, head NULLS LAST
