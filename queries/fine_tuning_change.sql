-- name: fine-tuning change
-- aliases: finetuning change, cosine similarity of attention, pretrained vs fine-tuned, kovaleva figure 5
-- paper: Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT", Section 4.3, Figure 5
-- description: Per head, the cosine similarity between the flattened attention maps of two runs over
--   the same inputs (e.g. the pre-trained model and a fine-tuned checkpoint on a GLUE dev set, both
--   ingested with --format glue), averaged over the first max_examples inputs (the paper: at most
--   1000); low = the head changed. Exact with --dense runs; with sparse runs only the weights both runs
--   kept enter the dot product. layer_mean is the mean over the layer's heads.
-- parameters:
--   base: run id of the reference model (required)
--   tuned: run id of the changed model (required)
--   max_examples: inputs to average over (default: 1000)
-- plot: heatmap cosine

WITH ex AS (
    SELECT a.example_id
    FROM examples a JOIN examples b ON b.example_id = a.example_id AND b.run_id = $tuned
    WHERE a.run_id = $base AND NOT a.skipped AND NOT b.skipped AND a.n_tokens = b.n_tokens
      AND a.sent_ids = b.sent_ids  -- the same inputs: same corpus file, same packing
      AND (SELECT corpus_sha256 || pack FROM runs WHERE run_id = $base)
        = (SELECT corpus_sha256 || pack FROM runs WHERE run_id = $tuned)
    ORDER BY a.example_id
    LIMIT $max_examples
),
a AS (SELECT * FROM attn_edges WHERE run_id = $base AND example_id IN (SELECT example_id FROM ex)),
b AS (SELECT * FROM attn_edges WHERE run_id = $tuned AND example_id IN (SELECT example_id FROM ex)),
dot AS (
    SELECT example_id, layer, head, sum(a.weight::DOUBLE * b.weight) AS dot
    FROM a JOIN b USING (example_id, layer, head, src_tok, dst_tok)
    GROUP BY ALL
),
norm_a AS (SELECT example_id, layer, head, sqrt(sum(weight::DOUBLE * weight)) AS n FROM a GROUP BY ALL),
norm_b AS (SELECT example_id, layer, head, sqrt(sum(weight::DOUBLE * weight)) AS n FROM b GROUP BY ALL),
per_head AS (
    SELECT layer, head, avg(coalesce(d.dot, 0) / (na.n * nb.n)) AS cosine, count(*) AS n_examples
    FROM norm_a na JOIN norm_b nb USING (example_id, layer, head)
    LEFT JOIN dot d USING (example_id, layer, head)
    GROUP BY layer, head
)
SELECT layer + 1 AS layer, head + 1 AS head, cosine, avg(cosine) OVER (PARTITION BY layer) AS layer_mean, n_examples
FROM per_head
ORDER BY layer, head
