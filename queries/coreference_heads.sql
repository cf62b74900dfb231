-- name: coreference heads
-- aliases: coreference, antecedent selection, coref heads, clark table 2
-- paper: Clark et al. 2019, "What Does BERT Look At?", Section 4.3, Table 2
-- description: Antecedent selection accuracy (percent). For every mention that has an antecedent (an
--   earlier mention of the same entity in the same input), a predictor picks one earlier word; it is
--   right when that word is the head word of one of the antecedents. An attention head picks the
--   word the mention's head word attends to most (word-level map, never itself, [CLS] or [SEP]).
--   Baselines: 'nearest mention' picks the head word of the closest earlier mention; 'head word
--   match' picks the closest earlier mention whose head word has the same (lower-cased) form, else
--   the nearest mention. Split by the mention's type (pronoun / proper / nominal, from the UPOS of
--   its head word). Only antecedents inside the input count: ingest documents with --pack window.
--   One row per baseline, then one per attention head, best first. With select_run, the head that is
--   best on that run (e.g. a training split) is marked 'selected' and listed first, so a head chosen
--   on one split is scored on another.
--   [CLS] and [SEP] stand for any special token (tokens.special). A decoder (causal attention) answers
--   alike: a head word attends only to earlier words, where every antecedent lies. A head word without
--   pieces of its own (text as written; words.n_toks = 0) has no word-level row: every head counts its
--   mention as not predicted.
-- parameters:
--   run [run]: run id (default: the latest run)
--   select_run [run]: run whose accuracies select the head; empty for the run itself (default: )
-- needs: SELECT count(*) FROM mentions WHERE run_id = $run
--   else: run {run} has no coreference mentions: ingest a corpus with CorefUD 'Entity=' annotations
--   (e.g. UD English GUM) with --pack window
-- keys: predictor, layer, head
-- plot: heatmap all_types pronoun proper nominal
-- figure: a layer x head heat map of each of `all_types`, `pronoun`, `proper`, `nominal`
-- labels:
--   all_types: all mentions

WITH runs_used AS (
    SELECT $run AS run_id UNION SELECT coalesce(nullif($select_run, ''), $run)
),
heads AS (  -- every head of the runs
    SELECT run_id, layer, unnest(range(n_heads))::SMALLINT AS head
    FROM (SELECT run_id, n_heads, unnest(range(n_layers))::SMALLINT AS layer FROM runs
          WHERE run_id IN (SELECT run_id FROM runs_used))
),
m AS (
    SELECT m.run_id, m.example_id, m.mention_id, m.entity_id, m.first_word, m.head_word, m.mention_type,
           lower(w.form) AS head_form
    FROM mentions m
    JOIN words w ON w.run_id = m.run_id AND w.example_id = m.example_id AND w.word_idx = m.head_word
    WHERE m.run_id IN (SELECT run_id FROM runs_used)
),
earlier AS (  -- every mention with every mention that starts before it in the same input
    SELECT a.run_id, a.example_id, a.mention_id, a.mention_type, a.head_word, a.head_form, a.entity_id,
           b.head_word AS b_head, b.head_form AS b_form, b.entity_id AS b_entity,
           b.first_word AS b_first, b.mention_id AS b_id
    FROM m a JOIN m b ON b.run_id = a.run_id AND b.example_id = a.example_id AND b.first_word < a.first_word
),
targets AS (
    SELECT DISTINCT run_id, example_id, mention_id, mention_type, head_word
    FROM earlier WHERE b_entity = entity_id
),
gold AS (
    SELECT DISTINCT run_id, example_id, mention_id, b_head AS word FROM earlier WHERE b_entity = entity_id
),
nearest AS (
    SELECT run_id, example_id, mention_id, arg_max(b_head, (b_first, b_id)) AS word FROM earlier GROUP BY ALL
),
same_head AS (
    SELECT run_id, example_id, mention_id, arg_max(b_head, (b_first, b_id)) AS word
    FROM earlier WHERE b_form = head_form GROUP BY ALL
),
predictions AS (
    SELECT 'nearest mention' AS predictor, NULL::SMALLINT AS layer, NULL::SMALLINT AS head,
           t.run_id, t.example_id, t.mention_id, t.mention_type, n.word
    FROM targets t JOIN nearest n USING (run_id, example_id, mention_id)
    UNION ALL
    SELECT 'head word match', NULL, NULL, t.run_id, t.example_id, t.mention_id, t.mention_type,
           coalesce(s.word, n.word)
    FROM targets t JOIN nearest n USING (run_id, example_id, mention_id)
    LEFT JOIN same_head s USING (run_id, example_id, mention_id)
    UNION ALL
    SELECT 'attention head', h.layer, h.head, t.run_id, t.example_id, t.mention_id, t.mention_type, r.dst_word
    FROM targets t
    JOIN heads h ON h.run_id = t.run_id
    LEFT JOIN word_rows r ON r.run_id = t.run_id AND r.example_id = t.example_id AND r.src_word = t.head_word
        AND r.layer = h.layer AND r.head = h.head
),
scored AS (
    SELECT p.*, g.word IS NOT NULL AS correct
    FROM predictions p
    LEFT JOIN gold g
        ON g.run_id = p.run_id AND g.example_id = p.example_id AND g.mention_id = p.mention_id AND g.word = p.word
),
selected AS (  -- the best head on the selection run
    SELECT layer, head FROM scored
    WHERE predictor = 'attention head' AND run_id = coalesce(nullif($select_run, ''), $run)
    GROUP BY layer, head
    ORDER BY avg(correct::INTEGER) DESC, layer, head
    LIMIT 1
)
SELECT
    predictor,
    layer + 1 AS layer,
    head + 1 AS head,
    coalesce(layer = (SELECT layer FROM selected) AND head = (SELECT head FROM selected), false) AS selected,
    100 * avg(correct::INTEGER) AS all_types,
    100 * avg(correct::INTEGER) FILTER (WHERE mention_type = 'pronoun') AS pronoun,
    100 * avg(correct::INTEGER) FILTER (WHERE mention_type = 'proper') AS proper,
    100 * avg(correct::INTEGER) FILTER (WHERE mention_type = 'nominal') AS nominal,
    count(*) AS n,
    count(*) FILTER (WHERE mention_type = 'pronoun') AS n_pronoun,
    count(*) FILTER (WHERE mention_type = 'proper') AS n_proper,
    count(*) FILTER (WHERE mention_type = 'nominal') AS n_nominal
FROM scored
WHERE run_id = $run
GROUP BY predictor, layer, head
ORDER BY predictor = 'attention head', selected DESC, all_types DESC, layer, head, predictor
