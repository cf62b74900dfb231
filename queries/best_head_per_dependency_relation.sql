-- name: best head per dependency relation
-- aliases: dependency heads, syntax heads, best head per relation, clark table 1, dependency relations
-- paper: Clark et al. 2019, "What Does BERT Look At?", Section 4.2, Table 1
-- description: Each attention head predicts, for every word, the other word it attends to most
--   (word-level map: attention TO a split word = sum over its pieces, FROM a split word = mean over
--   its pieces; [CLS]/[SEP] take part but are never predicted; a word's attention to itself is
--   ignored). Per relation: the head and direction (dependent -> head, or head -> dependent) whose
--   prediction is most often right, its accuracy, and the best fixed-offset baseline (the word at
--   offset -3..+2 from the dependent is its head). The 'all' row scores every word that has a head.
--   Heads are shown 1-based as layer-head.
-- parameters:
--   run: run id (default: the latest run)
--   min_count: relations with fewer occurrences are left out (default: 100)

WITH arcs AS (
    SELECT example_id, word_idx AS dep, head_word_idx AS gov, deprel AS relation
    FROM words
    WHERE run_id = $run AND head_word_idx IS NOT NULL AND deprel IS NOT NULL
),
totals AS (
    SELECT relation, count(*) AS n FROM arcs GROUP BY relation
    UNION ALL
    SELECT 'all', count(*) FROM arcs
),
kept AS (SELECT * FROM totals WHERE n >= $min_count),
hits_by_relation AS (
    -- dependent -> head: the dependent's most-attended word is its head
    SELECT a.relation, r.layer, r.head, 'dependent -> head' AS direction, count(*) AS correct
    FROM word_rows r
    JOIN arcs a ON r.example_id = a.example_id AND r.src_word = a.dep AND r.dst_word = a.gov
    WHERE r.run_id = $run
    GROUP BY ALL
    UNION ALL
    -- head -> dependent: the head's most-attended word is this dependent
    SELECT a.relation, r.layer, r.head, 'head -> dependent', count(*)
    FROM word_rows r
    JOIN arcs a ON r.example_id = a.example_id AND r.src_word = a.gov AND r.dst_word = a.dep
    WHERE r.run_id = $run
    GROUP BY ALL
),
hits AS (
    SELECT relation, layer, head, direction, correct FROM hits_by_relation
    UNION ALL
    SELECT 'all', layer, head, direction, sum(correct) FROM hits_by_relation GROUP BY ALL
),
best_head AS (
    SELECT relation, layer, head, direction, correct
    FROM hits
    WHERE relation IN (SELECT relation FROM kept)
    QUALIFY row_number() OVER (PARTITION BY relation ORDER BY correct DESC, direction, layer, head) = 1
),
offsets AS (
    SELECT unnest([-3, -2, -1, 1, 2]) AS "offset"
),
offset_counts AS (
    SELECT gov - dep AS "offset", relation, count(*) AS correct FROM arcs GROUP BY ALL
    UNION ALL
    SELECT gov - dep, 'all', count(*) FROM arcs GROUP BY ALL
),
offset_hits AS (
    SELECT o."offset", k.relation, coalesce(c.correct, 0) AS correct
    FROM offsets o CROSS JOIN kept k
    LEFT JOIN offset_counts c ON c."offset" = o."offset" AND c.relation = k.relation
),
best_offset AS (
    SELECT relation, "offset", correct
    FROM offset_hits
    QUALIFY row_number() OVER (PARTITION BY relation ORDER BY correct DESC, abs("offset"), "offset" DESC) = 1
)
SELECT
    k.relation,
    k.n,
    concat(b.layer + 1, '-', b.head + 1) AS best_head,
    b.direction,
    coalesce(b.correct, 0)::BIGINT AS correct,
    round(100.0 * coalesce(b.correct, 0) / k.n, 2) AS accuracy,
    CASE WHEN o."offset" > 0 THEN concat('+', o."offset") ELSE o."offset"::VARCHAR END AS baseline_offset,
    round(100.0 * coalesce(o.correct, 0) / k.n, 2) AS baseline_accuracy
FROM kept k
LEFT JOIN best_head b USING (relation)
LEFT JOIN best_offset o USING (relation)
ORDER BY k.relation <> 'all', k.n DESC, k.relation
