-- name: best head per dependency relation
-- aliases: dependency heads, syntax heads, best head per relation, clark table 1, dependency relations
-- paper: Clark et al. 2019, "What Does BERT Look At?", Section 4.2, Table 1
-- description: Each attention head predicts a head word for every word, as Clark et al.'s released
--   Syntax_Analysis notebook does (attn_head_predictor, evaluate_predictor), on the word-level map
--   (attention TO a split word = sum over its pieces, FROM a split word = mean over its pieces; a word's
--   attention to itself, [CLS] and [SEP] ignored). 'dependent -> head': the word a word attends to most is
--   its head (word_rows.dst_word). 'head -> dependent': the word attending most to a word is its head (the
--   transposed map, word_rows.from_word). A head never predicts ROOT; predictions range over every word of
--   the input (all its sentences with --pack pair/window); argmax ties go to the lowest word. A word
--   without pieces of its own (text as written: 'not' of 'cannot' where the tokenizer keeps 'cannot'
--   whole; words.n_toks = 0) has no word-level row and is never predicted: it counts in its relation's
--   n as a word no head gets right.
--   Possessive rule (poss_rule, the notebook's special case for 'poss', UD nmod:poss): a possessor whose
--   own prediction is not the last word of the input and whose next word in its sentence is exactly 's
--   or s' is scored by the prediction of that next word instead.
--   Rows: 'all' (every word with a DEPREL, roots included: no head is ever right on a root), 'all
--   (non-root)', then each relation (DEPREL with subtype) with at least min_count words, but 'root' and
--   'punct', as the notebook prints them. Per row: the head and direction with the most correct
--   predictions (ties: the higher layer, then the higher head, then 'head -> dependent'), its accuracy,
--   and the best fixed-offset baseline: offset o predicts for the word at 1-based position i of its
--   sentence of n words the word max(0, min(i + o, n)) (0 = ROOT, so a root can be right), for o in
--   -3..+2 (0 included), the possessive rule applying with 'last word of the sentence'; ties: the
--   larger offset. Heads are shown 1-based as layer-head.
--   Special tokens are those of tokens.special, whatever their strings ([CLS], [SEP], <s>, </s>, a BOS).
--   In a decoder (causal attention) a word attends only to itself and earlier words: 'dependent -> head'
--   finds only heads to the left of the word, 'head -> dependent' (the later word attending most to it)
--   only heads to its right; the first word of an input attends to no other word, and no other word
--   attends to the last: their predictions are the tie rule's lowest other word at weight 0. The
--   offset baselines are the same for every model.
-- parameters:
--   run [run]: run id (default: the latest run)
--   min_count: relations with fewer words are left out ('all' rows excepted) (default: 100)
--   poss_rule: true: score nmod:poss with the released code's possessive rule; false: plainly (default: true)
--   direction: where the best head is looked for: both, dependent -> head, or head -> dependent (default: both)
-- needs: dependency relations
-- needs: SELECT ($min_count >= 0)::INTEGER
--   else: $min_count: expected 0 or more
-- keys: relation
-- plot: hbars relation accuracy baseline_accuracy best_head baseline_offset
-- figure: per `relation`, a bar of `accuracy` tagged with `best_head` above a bar of `baseline_accuracy` tagged with
--   `baseline_offset`
-- labels:
--   accuracy: accuracy (%)
--   best_head: best head (layer-head)
--   baseline_offset: best fixed offset

WITH sentence_words AS (
    SELECT
        example_id,
        word_idx AS word,
        head_word_idx AS gov,                      -- NULL: ROOT
        deprel AS relation,
        word_idx - min(word_idx) OVER (PARTITION BY example_id, sent_id) + 1 AS pos,  -- 1-based in its sentence
        count(*) OVER (PARTITION BY example_id, sent_id) AS sent_len,
        count(*) OVER (PARTITION BY example_id) AS input_len,
        lead(form) OVER (PARTITION BY example_id, sent_id ORDER BY word_idx) AS next_form
    FROM words
    WHERE run_id = $run
),
scored AS (
    SELECT
        example_id, word, gov, relation, pos, sent_len, input_len,
        gov IS NULL AS is_root,
        CASE WHEN gov IS NULL THEN 0 ELSE gov - word + pos END AS gold,  -- 1-based in the sentence, 0 = ROOT
        $poss_rule::BOOLEAN AND relation = 'nmod:poss' AND coalesce(next_form IN ('''s', 's'''), false) AS possessive
    FROM sentence_words
    WHERE relation IS NOT NULL
),
totals AS (
    SELECT relation, count(*) AS n FROM scored GROUP BY relation
    UNION ALL
    SELECT 'all', count(*) FROM scored
    UNION ALL
    SELECT 'all (non-root)', count(*) FROM scored WHERE NOT is_root
),
kept AS (
    SELECT * FROM totals
    WHERE relation IN ('all', 'all (non-root)') OR (n >= $min_count AND relation NOT IN ('root', 'punct'))
),
next_rows AS (
    -- the predictions of the word after each possessor (the possessive rule's 's)
    SELECT r.example_id, r.layer, r.head, s.word, r.dst_word, r.from_word
    FROM word_rows r
    JOIN scored s ON r.example_id = s.example_id AND r.src_word = s.word + 1 AND s.possessive
    WHERE r.run_id = $run
),
head_hits AS (
    SELECT
        s.relation, s.is_root, r.layer, r.head,
        count_if(CASE WHEN s.possessive AND r.dst_word + 1 < s.input_len THEN x.dst_word ELSE r.dst_word END
                 = s.gov) AS dep_to_head,
        count_if(CASE WHEN s.possessive AND r.from_word + 1 < s.input_len THEN x.from_word ELSE r.from_word END
                 = s.gov) AS head_to_dep
    FROM word_rows r
    JOIN scored s ON r.example_id = s.example_id AND r.src_word = s.word
    LEFT JOIN next_rows x ON x.example_id = s.example_id AND x.word = s.word AND x.layer = r.layer AND x.head = r.head
    WHERE r.run_id = $run
    GROUP BY ALL
),
hits_by_group AS (
    SELECT relation, is_root, layer, head, 'dependent -> head' AS direction, dep_to_head AS correct FROM head_hits
    UNION ALL
    SELECT relation, is_root, layer, head, 'head -> dependent', head_to_dep FROM head_hits
),
hits AS (
    SELECT relation, layer, head, direction, sum(correct) AS correct FROM hits_by_group GROUP BY ALL
    UNION ALL
    SELECT 'all' AS relation, layer, head, direction, sum(correct) FROM hits_by_group GROUP BY ALL
    UNION ALL
    SELECT 'all (non-root)', layer, head, direction, sum(correct) FROM hits_by_group WHERE NOT is_root GROUP BY ALL
),
best_head AS (
    SELECT relation, layer, head, direction, correct
    FROM hits
    WHERE relation IN (SELECT relation FROM kept) AND $direction IN ('both', direction)
    QUALIFY row_number() OVER (
        PARTITION BY relation ORDER BY correct DESC, layer DESC, head DESC, direction = 'head -> dependent' DESC
    ) = 1
),
offset_predictions AS (
    SELECT s.*, o."offset",
           greatest(0, least(s.pos + o."offset", s.sent_len)) AS p,
           greatest(0, least(s.pos + 1 + o."offset", s.sent_len)) AS p_next
    FROM scored s CROSS JOIN (SELECT unnest(range(-3, 3)) AS "offset") o
),
offset_by_group AS (
    SELECT relation, is_root, "offset",
           count_if(CASE WHEN possessive AND p < sent_len THEN p_next ELSE p END = gold) AS correct
    FROM offset_predictions
    GROUP BY ALL
),
offset_hits AS (
    SELECT relation, "offset", sum(correct) AS correct FROM offset_by_group GROUP BY ALL
    UNION ALL
    SELECT 'all' AS relation, "offset", sum(correct) FROM offset_by_group GROUP BY ALL
    UNION ALL
    SELECT 'all (non-root)', "offset", sum(correct) FROM offset_by_group WHERE NOT is_root GROUP BY ALL
),
best_offset AS (
    SELECT relation, "offset", correct
    FROM offset_hits
    WHERE relation IN (SELECT relation FROM kept)
    QUALIFY row_number() OVER (PARTITION BY relation ORDER BY correct DESC, "offset" DESC) = 1
)
SELECT
    k.relation,
    k.n,
    concat(b.layer + 1, '-', b.head + 1) AS best_head,
    b.direction,
    coalesce(b.correct, 0)::BIGINT AS correct,
    round(100 * coalesce(b.correct, 0) / k.n, 2) AS accuracy,
    CASE WHEN o."offset" > 0 THEN concat('+', o."offset") ELSE o."offset"::VARCHAR END AS baseline_offset,
    round(100 * o.correct / k.n, 2) AS baseline_accuracy
FROM kept k
LEFT JOIN best_head b USING (relation)
LEFT JOIN best_offset o USING (relation)
WHERE CASE WHEN $direction IN ('both', 'dependent -> head', 'head -> dependent') THEN true
      ELSE error('atlas: $direction: expected both, dependent -> head or head -> dependent') END
ORDER BY k.relation <> 'all', k.relation <> 'all (non-root)', k.n DESC, k.relation
