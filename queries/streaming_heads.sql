-- name: streaming heads
-- aliases: streaming head, sink and window cache, streamingllm cache, duoattention, kv cache compression, local heads
-- paper: Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks" (StreamingLLM's cache); Xiao et al. 2024, "DuoAttention", Section 3 (streaming heads against retrieval heads)
-- description: Per head, the share of its attention that a StreamingLLM cache keeps: the first `sink`
--   tokens (the attention sinks) and the last `window_size` tokens up to the query, as the mean over the input's
--   rows (every token's) and then over inputs, each weighing the same; streaming: the head keeps at least
--   `keep` of it, so a cache of that shape would serve it (DuoAttention's streaming heads; the others need
--   the full cache). Grouped-query attention: a key/value head (kv_head) is streaming only where all its
--   query heads are (kv_streaming), since they read one cache. layer_cache: the share of a full cache
--   (keys and values) the layer keeps at a context of `length` tokens, its streaming key/value heads
--   holding sink + window tokens and the others all; model_cache: the same over every layer. In an
--   encoder the window reaches `window_size` - 1 tokens on either side. From table attn_distance (the dense
--   maps summed at ingest by distance in powers of two, with the part to the first token and the first 4):
--   exact on a dense run (on a sparse one each bucket's shares to 1/2048), whence `window_size` a power of two
--   and `sink` 0, 1 or 4. With `window_size` at least the longest input every head keeps 1.
-- parameters:
--   run [run]: run id (default: the latest run)
--   sink: the first tokens the cache keeps: 0, 1 or 4 (default: 4)
--   window_size: the last tokens up to the query the cache keeps, a power of two (default: 64)
--   keep: a head is streaming when the cache keeps at least this share of its attention (default: 0.95)
--   length: the context length at which layer_cache and model_cache are counted (default: 32768)
-- needs: SELECT count(*) FROM attn_distance WHERE run_id = $run
--   else: run {run} holds no attention-distance profile (ingested before the atlas kept them): ingest it
--   again into another store
-- needs: SELECT ($sink IN (0, 1, 4))::INTEGER
--   else: $sink: expected 0, 1 or 4 first tokens
-- needs: SELECT ($window_size >= 1 AND power(2, round(log2($window_size::DOUBLE))) = $window_size)::INTEGER
--   else: $window_size: expected a power of two (1, 2, 4, ...)
-- needs: SELECT ($length >= 1)::INTEGER
--   else: $length: expected a context of 1 token or more
-- keys: layer, head
-- plot: heatmap kept_share
-- figure: a layer x head heat map of the share of each head's attention a sink + window cache keeps

WITH shape AS (
    SELECT n_layers, n_heads, coalesce(n_kv_heads, n_heads) AS n_kv
    FROM runs
    WHERE run_id = $run
),
per_input AS (
    SELECT d.example_id, d.layer, d.head,
           sum(CASE
                   WHEN d.bucket <= round(log2($window_size::DOUBLE)) THEN d.mass::DOUBLE
                   ELSE CASE $sink WHEN 0 THEN 0 WHEN 1 THEN d.sink_1 ELSE d.sink_4 END::DOUBLE
               END) AS kept
    FROM attn_distance d
    WHERE d.run_id = $run
    GROUP BY d.example_id, d.layer, d.head
),
heads AS (
    SELECT p.layer, p.head, avg(p.kept) AS kept_share, avg(p.kept) >= $keep AS streaming,
           (p.head // (s.n_heads // s.n_kv))::SMALLINT AS kv_head
    FROM per_input p
    CROSS JOIN shape s
    GROUP BY p.layer, p.head, s.n_heads, s.n_kv
),
kv AS (
    SELECT layer, kv_head, bool_and(streaming) AS kv_streaming
    FROM heads
    GROUP BY layer, kv_head
),
layers AS (
    SELECT layer,
           avg(CASE WHEN kv_streaming THEN least($length, $sink + $window_size) ELSE $length END) / $length AS layer_cache
    FROM kv
    GROUP BY layer
)
SELECT h.layer + 1 AS layer, h.head + 1 AS head, h.kept_share, h.streaming, h.kv_head + 1 AS kv_head, k.kv_streaming,
       l.layer_cache,
       (SELECT avg(layer_cache) FROM layers) AS model_cache
FROM heads h
JOIN kv k ON k.layer = h.layer AND k.kv_head = h.kv_head
JOIN layers l ON l.layer = h.layer
ORDER BY h.layer, h.head
