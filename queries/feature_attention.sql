-- name: feature attention
-- aliases: attention to linguistic features, vertical stripes, attention to nouns verbs negation, kovaleva figure 6
-- paper: Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT", Section 4.4, Figure 6
-- description: Per head, the attention a token of a kind receives: the sum of the weights it gets from
--   every token of the input, divided by the input length; the maximum over the tokens of that kind
--   in an input; the mean over the inputs that contain the kind (inputs without it are left out).
--   Kinds: noun (UPOS NOUN), verb (VERB), pronoun (PRON), subject (nsubj*, csubj*), object (obj,
--   dobj, iobj), negation (the paper's list: neither, nor, not, never, none, don't, won't, didn't,
--   hadn't, haven't, can't, isn't, wasn't, shouldn't, couldn't, nothing, nowhere; and "n't", the form
--   spaCy and UD give the clitic), [CLS] and [SEP]. A word's tokens are its pieces. Exact with --dense
--   runs (with sparse runs the weights below the kept mass are missing from the sums).
-- parameters:
--   run: run id (default: the latest run)
-- plot: heatmap cls sep noun verb pronoun subject object negation

WITH kinds AS (
    SELECT t.example_id, t.tok_idx, k.kind
    FROM tokens t
    LEFT JOIN words w ON w.run_id = t.run_id AND w.example_id = t.example_id AND w.word_idx = t.word_idx
    CROSS JOIN (VALUES ('cls'), ('sep'), ('noun'), ('verb'), ('pronoun'), ('subject'), ('object'), ('negation'))
        AS k(kind)
    WHERE t.run_id = $run AND CASE k.kind
        WHEN 'cls' THEN t.special = '[CLS]'
        WHEN 'sep' THEN t.special = '[SEP]'
        WHEN 'noun' THEN w.upos = 'NOUN'
        WHEN 'verb' THEN w.upos = 'VERB'
        WHEN 'pronoun' THEN w.upos = 'PRON'
        WHEN 'subject' THEN split_part(w.deprel, ':', 1) IN ('nsubj', 'nsubjpass', 'csubj', 'csubjpass')
        WHEN 'object' THEN split_part(w.deprel, ':', 1) IN ('obj', 'dobj', 'iobj')
        WHEN 'negation' THEN lower(w.form) IN ('neither', 'nor', 'not', 'never', 'none', 'don''t', 'won''t',
            'didn''t', 'hadn''t', 'haven''t', 'can''t', 'isn''t', 'wasn''t', 'shouldn''t', 'couldn''t',
            'nothing', 'nowhere', 'n''t')
    END
),
received AS (  -- per input, head and token: attention received, summed over source tokens, / length
    SELECT e.example_id, e.layer, e.head, e.dst_tok, sum(e.weight) / any_value(x.n_tokens) AS score
    FROM attn_edges e
    JOIN examples x ON x.run_id = e.run_id AND x.example_id = e.example_id
    WHERE e.run_id = $run
    GROUP BY e.example_id, e.layer, e.head, e.dst_tok
),
per_input AS (
    SELECT r.layer, r.head, k.kind, r.example_id, max(r.score) AS score
    FROM received r JOIN kinds k ON k.example_id = r.example_id AND k.tok_idx = r.dst_tok
    GROUP BY ALL
)
SELECT layer + 1 AS layer, head + 1 AS head,
       avg(score) FILTER (WHERE kind = 'cls') AS cls,
       avg(score) FILTER (WHERE kind = 'sep') AS sep,
       avg(score) FILTER (WHERE kind = 'noun') AS noun,
       avg(score) FILTER (WHERE kind = 'verb') AS verb,
       avg(score) FILTER (WHERE kind = 'pronoun') AS pronoun,
       avg(score) FILTER (WHERE kind = 'subject') AS subject,
       avg(score) FILTER (WHERE kind = 'object') AS object,
       avg(score) FILTER (WHERE kind = 'negation') AS negation,
       count(DISTINCT example_id) FILTER (WHERE kind = 'negation') AS n_negation_inputs
FROM per_input
GROUP BY layer, head
ORDER BY layer, head
