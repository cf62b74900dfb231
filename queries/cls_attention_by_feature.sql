-- name: cls attention by feature
-- aliases: last layer cls attention, what does cls attend to, kovaleva figure 7
-- paper: Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT", Section 4.5, Figure 7
-- description: Per head of the last layer, the attention from [CLS] to tokens of each kind of
--   'feature attention' ([CLS], [SEP], nouns, verbs, pronouns, subjects, objects, negation, and
--   punctuation pieces), summed over the tokens of the kind and averaged over the inputs (an input
--   without the kind counts 0). Exact with --dense runs.
-- parameters:
--   run: run id (default: the latest run)
-- plot: heatmap sep cls punctuation noun verb

WITH last AS (SELECT max(layer) AS layer FROM attn_rows WHERE run_id = $run),
cls AS (SELECT example_id, tok_idx FROM tokens WHERE run_id = $run AND special = '[CLS]'),
kinds AS (
    SELECT t.example_id, t.tok_idx,
           t.special = '[CLS]' AS cls, t.special = '[SEP]' AS sep, coalesce(t.is_punct, false) AS punctuation,
           w.upos = 'NOUN' AS noun, w.upos = 'VERB' AS verb, w.upos = 'PRON' AS pronoun,
           split_part(w.deprel, ':', 1) IN ('nsubj', 'nsubjpass', 'csubj', 'csubjpass') AS subject,
           split_part(w.deprel, ':', 1) IN ('obj', 'dobj', 'iobj') AS object,
           lower(w.form) IN ('neither', 'nor', 'not', 'never', 'none', 'don''t', 'won''t', 'didn''t', 'hadn''t',
               'haven''t', 'can''t', 'isn''t', 'wasn''t', 'shouldn''t', 'couldn''t', 'nothing', 'nowhere',
               'n''t') AS negation
    FROM tokens t
    LEFT JOIN words w ON w.run_id = t.run_id AND w.example_id = t.example_id AND w.word_idx = t.word_idx
    WHERE t.run_id = $run
),
per_input AS (
    SELECT e.example_id, e.head,
           sum(e.weight) FILTER (WHERE k.cls) AS cls, sum(e.weight) FILTER (WHERE k.sep) AS sep,
           sum(e.weight) FILTER (WHERE k.punctuation) AS punctuation,
           sum(e.weight) FILTER (WHERE k.noun) AS noun, sum(e.weight) FILTER (WHERE k.verb) AS verb,
           sum(e.weight) FILTER (WHERE k.pronoun) AS pronoun, sum(e.weight) FILTER (WHERE k.subject) AS subject,
           sum(e.weight) FILTER (WHERE k.object) AS object, sum(e.weight) FILTER (WHERE k.negation) AS negation
    FROM attn_edges e
    JOIN cls c ON c.example_id = e.example_id AND c.tok_idx = e.src_tok
    JOIN kinds k ON k.example_id = e.example_id AND k.tok_idx = e.dst_tok
    WHERE e.run_id = $run AND e.layer = (SELECT layer FROM last)
    GROUP BY e.example_id, e.head
)
SELECT (SELECT layer FROM last) + 1 AS layer, head + 1 AS head,
       avg(coalesce(cls, 0)) AS cls, avg(coalesce(sep, 0)) AS sep, avg(coalesce(punctuation, 0)) AS punctuation,
       avg(coalesce(noun, 0)) AS noun, avg(coalesce(verb, 0)) AS verb, avg(coalesce(pronoun, 0)) AS pronoun,
       avg(coalesce(subject, 0)) AS subject, avg(coalesce(object, 0)) AS object,
       avg(coalesce(negation, 0)) AS negation, count(*) AS n_inputs
FROM per_input
GROUP BY head
ORDER BY head
