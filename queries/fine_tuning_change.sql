-- name: fine-tuning change
-- aliases: finetuning change, cosine similarity of attention, pretrained vs fine-tuned, kovaleva figure 5
-- paper: Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT", Section 4.3, Figure 5
-- description: Per head, the cosine similarity between the flattened attention maps of two runs over
--   the same inputs (e.g. the pre-trained model and a fine-tuned checkpoint on a GLUE dev set, both
--   ingested with --format glue --dense), averaged over the inputs (the released notebook, cell 31);
--   low = the head changed. The inputs are a random sample of max_examples of those both runs share
--   (all of them when fewer; the paper samples 1000 from larger dev sets, cell 25), seeded: the inputs
--   with the smallest md5 of 'seed:example_id'. A map covers the input's tokens; the notebook flattens
--   maps padded to 200 tokens, whose padding rows also enter the cosine. layer_mean is the mean over the
--   layer's heads. Needs dense runs (--dense): a sparse run is refused (the cosine needs every weight).
-- parameters:
--   base [run]: run id of the reference model (required)
--   tuned [run]: run id of the changed model (required)
--   max_examples: inputs to average over (default: 1000)
--   seed: seed of the sample of inputs (default: 0)
-- needs: SELECT ($max_examples >= 1)::INTEGER
--   else: $max_examples: expected 1 or more
-- plot: heatmap cosine
-- figure: a layer x head heat map of each of `cosine`
-- labels:
--   cosine: cosine similarity, base and tuned

WITH dense AS (
    SELECT CASE WHEN count(*) FILTER (WHERE kept_mass IS NOT NULL) = 0 THEN true
        ELSE error('atlas: run ''' || string_agg(run_id, ''', ''') FILTER (WHERE kept_mass IS NOT NULL)
            || ''' is sparse: fine-tuning change compares whole attention maps; ingest with --dense')
    END AS ok
    FROM runs WHERE run_id IN ($base, $tuned)
),
ex AS (
    SELECT a.example_id
    FROM examples a JOIN examples b ON b.example_id = a.example_id AND b.run_id = $tuned
    WHERE a.run_id = $base AND NOT a.skipped AND NOT b.skipped AND a.n_tokens = b.n_tokens
      AND a.sent_ids = b.sent_ids  -- the same inputs: same corpus file, same packing
      AND (SELECT corpus_sha256 || pack FROM runs WHERE run_id = $base)
        = (SELECT corpus_sha256 || pack FROM runs WHERE run_id = $tuned)
      AND (SELECT ok FROM dense)
    ORDER BY md5($seed::VARCHAR || ':' || a.example_id::VARCHAR)
    LIMIT $max_examples
),
a AS (SELECT * FROM attn_edges WHERE run_id = $base AND example_id IN (SELECT example_id FROM ex)),
b AS (SELECT * FROM attn_edges WHERE run_id = $tuned AND example_id IN (SELECT example_id FROM ex)),
per_input AS (
    SELECT example_id, layer, head,
           sum(a.weight::DOUBLE * b.weight) / sqrt(sum(a.weight::DOUBLE * a.weight) * sum(b.weight::DOUBLE * b.weight))
               AS cosine
    FROM a JOIN b USING (example_id, layer, head, src_tok, dst_tok)
    GROUP BY ALL
),
per_head AS (
    SELECT layer, head, avg(cosine) AS cosine, count(*) AS n_examples FROM per_input GROUP BY layer, head
)
SELECT layer + 1 AS layer, head + 1 AS head, cosine, avg(cosine) OVER (PARTITION BY layer) AS layer_mean, n_examples
FROM per_head
ORDER BY layer, head
