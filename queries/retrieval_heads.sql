-- name: retrieval heads
-- aliases: retrieval head, retrieval score, needle in a haystack, needle heads, wu et al, copy-paste heads
-- paper: Wu et al. 2024, "Retrieval Head Mechanistically Explains Long-Context Factuality", Section 2; the score of their released retrieval_head_detection.py (retrieval_calculate)
-- description: Per head, Wu et al.'s retrieval score on a needle probe (ingest --format needle): at each
--   token the model generated in answer, the head scores 1 / (the answer's length) where its top-1
--   attention falls on the answer's span in the haystack on a token of the same vocabulary id as the one
--   generated (it copies the needle). A generated token is the next token of the row before it: the rows
--   from the prompt's last token to the continuation's last but one, as their decode feeds them. Summed per
--   input, then averaged over the inputs whose answer passed their filter (ROUGE-1 recall of the answer by
--   the continuation above 50, examples.needle_recall), as their head_counter is; an input whose answer was
--   not found in the prompt counts with no hit, as theirs does. n_inputs: the inputs averaged. Wu et al. find fewer than 5 % of a
--   long-context model's heads with a score above 0.1. From attn_rows.argmax_tok (the first token of the
--   largest weight): exact on a sparse run too.
-- parameters:
--   run [run]: run id (default: the latest run)
-- needs: SELECT count(*) FROM examples WHERE run_id = $run AND needle_start IS NOT NULL
--   else: run {run} is no needle probe: ingest with --format needle (a decoder)
-- needs: SELECT count(*) FROM examples WHERE run_id = $run AND needle_recall > 50
--   else: run {run}: no answer passed the filter (ROUGE-1 recall of the needle above 50): the model did not
--   retrieve the needle at any length and depth
-- keys: layer, head
-- plot: heatmap retrieval_score
-- figure: a layer x head heat map of the retrieval score (Wu et al.'s Figure 2)

WITH passed AS (  -- an input whose answer was not found in its prompt counts, with no hit
    SELECT example_id, needle_start, needle_end, generated_start, n_generated
    FROM examples
    WHERE run_id = $run AND NOT skipped AND needle_recall > 50
),
hits AS (  -- each input's score per head: 1 / (the answer's length) per copying row
    SELECT r.layer, r.head, sum(1 / (p.needle_end - p.needle_start)::DOUBLE) AS score
    FROM attn_rows r
    JOIN passed p ON p.example_id = r.example_id
    JOIN tokens seen ON seen.run_id = $run AND seen.example_id = r.example_id AND seen.tok_idx = r.argmax_tok
    JOIN tokens made ON made.run_id = $run AND made.example_id = r.example_id AND made.tok_idx = r.src_tok + 1
    WHERE r.run_id = $run
      AND r.src_tok BETWEEN p.generated_start - 1 AND p.generated_start + p.n_generated - 2
      AND r.argmax_tok >= p.needle_start AND r.argmax_tok < p.needle_end
      AND seen.piece_id = made.piece_id
    GROUP BY r.layer, r.head
),
heads AS (
    SELECT l.layer, h.head
    FROM (SELECT unnest(range(n_layers))::SMALLINT AS layer FROM runs WHERE run_id = $run) l,
         (SELECT unnest(range(n_heads))::SMALLINT AS head FROM runs WHERE run_id = $run) h
)
SELECT h.layer + 1 AS layer, h.head + 1 AS head,
       coalesce(t.score, 0) / (SELECT count(*) FROM passed) AS retrieval_score, (SELECT count(*) FROM passed) AS n_inputs
FROM heads h
LEFT JOIN hits t ON t.layer = h.layer AND t.head = h.head
ORDER BY retrieval_score DESC, h.layer, h.head
