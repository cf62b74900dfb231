-- name: token to token
-- aliases: verb subject attention, noun pronoun attention, token-to-token attention, kovaleva section 4.5
-- paper: Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT", Section 4.5
-- description: Per head, token-level attention between syntactically related words (the released
--   notebook, cells 14-16 and 49-51): subject_to_verb is the largest weight from a piece of a subject to
--   a piece of its verb (a word with relation nsubj whose head has UPOS VERB, from the stored parse) over
--   the input's subject-verb pairs, verb_to_subject the same in the other direction; averaged over every
--   input, an input without a pair counting 0. The notebook pairs the i-th subject piece position with
--   the i-th verb piece position (a zip of separately collected positions); this entry takes the pairs
--   of the parse. noun_to_pronoun and pronoun_to_noun are the project's reading of the paper's
--   noun-pronoun relation (its code is not released): the same over every noun (NN NNS NNP NNPS) and
--   pronoun (PRP PRP$) of the input. Reads single weights, so it needs a dense run (--dense): a sparse
--   run is refused (the largest weight over pairs from different rows is not known from kept edges).
-- parameters:
--   run [run]: run id (default: the latest run)
-- needs: dependency relations
-- needs: SELECT count(*) FROM runs WHERE run_id = $run AND kept_mass IS NULL
--   else: run {run} is sparse: token to token reads single attention weights; ingest with --dense
-- plot: heatmap subject_to_verb verb_to_subject noun_to_pronoun pronoun_to_noun
-- figure: a layer x head heat map of each of `subject_to_verb`, `verb_to_subject`, `noun_to_pronoun`, `pronoun_to_noun`
-- labels:
--   subject_to_verb: subject → verb
--   verb_to_subject: verb → subject
--   noun_to_pronoun: noun → pronoun
--   pronoun_to_noun: pronoun → noun

WITH dense AS (
    SELECT CASE WHEN kept_mass IS NULL THEN true ELSE error('atlas: run ' || run_id
        || ' is sparse: token to token reads single attention weights; ingest with --dense')
    END AS ok
    FROM runs WHERE run_id = $run
),
w AS (SELECT * FROM words WHERE run_id = $run),
t AS (SELECT example_id, tok_idx, word_idx FROM tokens WHERE run_id = $run AND word_idx IS NOT NULL),
subject_verb AS (
    SELECT s.example_id, s.word_idx AS subject, v.word_idx AS verb
    FROM w s JOIN w v ON v.example_id = s.example_id AND v.word_idx = s.head_word_idx
    WHERE s.deprel = 'nsubj' AND v.upos = 'VERB'
),
noun_pronoun AS (
    SELECT n.example_id, n.word_idx AS noun, p.word_idx AS pronoun
    FROM w n JOIN w p ON p.example_id = n.example_id
    WHERE n.xpos IN ('NN', 'NNS', 'NNP', 'NNPS') AND p.xpos IN ('PRP', 'PRP$')
),
word_pairs AS (  -- (relation, attending word, attended word)
    SELECT example_id, 'subject_to_verb' AS relation, subject AS src_word, verb AS dst_word FROM subject_verb
    UNION ALL SELECT example_id, 'verb_to_subject', verb, subject FROM subject_verb
    UNION ALL SELECT example_id, 'noun_to_pronoun', noun, pronoun FROM noun_pronoun
    UNION ALL SELECT example_id, 'pronoun_to_noun', pronoun, noun FROM noun_pronoun
),
tok_pairs AS (
    SELECT DISTINCT p.example_id, p.relation, ts.tok_idx AS src_tok, td.tok_idx AS dst_tok
    FROM word_pairs p
    JOIN t ts ON ts.example_id = p.example_id AND ts.word_idx = p.src_word
    JOIN t td ON td.example_id = p.example_id AND td.word_idx = p.dst_word
),
per_input AS (  -- per input, head and relation: the largest weight over the pairs' pieces
    SELECT e.layer, e.head, p.relation, p.example_id, max(e.weight) AS score
    FROM attn_edges e
    JOIN tok_pairs p ON p.example_id = e.example_id AND p.src_tok = e.src_tok AND p.dst_tok = e.dst_tok
    WHERE e.run_id = $run AND (SELECT ok FROM dense)
    GROUP BY ALL
),
heads AS (SELECT DISTINCT layer, head FROM attn_rows WHERE run_id = $run),
n AS (SELECT count(*) AS n_inputs FROM examples WHERE run_id = $run AND NOT skipped)
SELECT h.layer + 1 AS layer, h.head + 1 AS head,  -- sums over the inputs with a pair / every input
       coalesce(sum(p.score) FILTER (WHERE p.relation = 'subject_to_verb'), 0) / any_value(n_inputs) AS subject_to_verb,
       coalesce(sum(p.score) FILTER (WHERE p.relation = 'verb_to_subject'), 0) / any_value(n_inputs) AS verb_to_subject,
       coalesce(sum(p.score) FILTER (WHERE p.relation = 'noun_to_pronoun'), 0) / any_value(n_inputs) AS noun_to_pronoun,
       coalesce(sum(p.score) FILTER (WHERE p.relation = 'pronoun_to_noun'), 0) / any_value(n_inputs) AS pronoun_to_noun,
       count(p.example_id) FILTER (WHERE p.relation = 'subject_to_verb') AS n_subject_verb_inputs,
       count(p.example_id) FILTER (WHERE p.relation = 'noun_to_pronoun') AS n_noun_pronoun_inputs,
       any_value(n_inputs) AS n_inputs
FROM heads h CROSS JOIN n LEFT JOIN per_input p ON p.layer = h.layer AND p.head = h.head
GROUP BY h.layer, h.head
ORDER BY h.layer, h.head
