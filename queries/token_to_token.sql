-- name: token to token
-- aliases: verb subject attention, noun pronoun attention, token-to-token attention, kovaleva section 4.5
-- paper: Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT", Section 4.5
-- description: Per head, word-level attention (Clark et al.'s conversion: FROM a word = mean over its
--   pieces, TO a word = sum over its pieces) from each verb to its subject (a word with relation
--   nsubj* / csubj* whose head is the verb), averaged over verb-subject pairs; and from each pronoun
--   (UPOS PRON) to the noun of its input it attends to most (UPOS NOUN or PROPN), averaged over
--   pronouns; beside each, the same for the word right before (the previous-token attention the paper
--   found these heads hard to tell apart from). Exact with --dense runs.
-- parameters:
--   run: run id (default: the latest run)
-- plot: heatmap verb_to_subject pronoun_to_noun

WITH w AS (SELECT * FROM words WHERE run_id = $run),
t AS (SELECT example_id, tok_idx, word_idx FROM tokens WHERE run_id = $run AND word_idx IS NOT NULL),
word_attn AS (  -- word-level weight for every word pair with any kept edge
    SELECT e.example_id, e.layer, e.head, ts.word_idx AS src_word, td.word_idx AS dst_word,
           sum(e.weight) / any_value(ws.n_toks) AS weight
    FROM attn_edges e
    JOIN t ts ON ts.example_id = e.example_id AND ts.tok_idx = e.src_tok
    JOIN t td ON td.example_id = e.example_id AND td.tok_idx = e.dst_tok
    JOIN w ws ON ws.example_id = e.example_id AND ws.word_idx = ts.word_idx
    WHERE e.run_id = $run
    GROUP BY e.example_id, e.layer, e.head, ts.word_idx, td.word_idx
),
heads AS (SELECT DISTINCT layer, head FROM attn_rows WHERE run_id = $run),
verb_subject AS (
    SELECT s.example_id, s.head_word_idx AS src_word, s.word_idx AS dst_word
    FROM w s JOIN w v ON v.example_id = s.example_id AND v.word_idx = s.head_word_idx
    WHERE v.upos = 'VERB' AND split_part(s.deprel, ':', 1) IN ('nsubj', 'nsubjpass', 'csubj', 'csubjpass')
),
pronoun_noun AS (
    SELECT p.example_id, p.word_idx AS src_word, n.word_idx AS dst_word
    FROM w p JOIN w n ON n.example_id = p.example_id AND n.upos IN ('NOUN', 'PROPN') AND n.word_idx <> p.word_idx
    WHERE p.upos = 'PRON'
),
vs AS (
    SELECT h.layer, h.head,
           avg(coalesce(a.weight, 0)) AS verb_to_subject,
           avg(coalesce(prev.weight, 0)) AS verb_to_previous_word,
           count(*) AS n_verb_subject
    FROM verb_subject p CROSS JOIN heads h
    LEFT JOIN word_attn a ON a.example_id = p.example_id AND a.layer = h.layer AND a.head = h.head
        AND a.src_word = p.src_word AND a.dst_word = p.dst_word
    LEFT JOIN word_attn prev ON prev.example_id = p.example_id AND prev.layer = h.layer AND prev.head = h.head
        AND prev.src_word = p.src_word AND prev.dst_word = p.src_word - 1
    GROUP BY h.layer, h.head
),
pn_best AS (
    SELECT h.layer, h.head, p.example_id, p.src_word, max(coalesce(a.weight, 0)) AS weight
    FROM pronoun_noun p CROSS JOIN heads h
    LEFT JOIN word_attn a ON a.example_id = p.example_id AND a.layer = h.layer AND a.head = h.head
        AND a.src_word = p.src_word AND a.dst_word = p.dst_word
    GROUP BY ALL
),
pn AS (
    SELECT b.layer, b.head, avg(b.weight) AS pronoun_to_noun, avg(coalesce(prev.weight, 0)) AS pronoun_to_previous_word,
           count(*) AS n_pronouns
    FROM pn_best b
    LEFT JOIN word_attn prev ON prev.example_id = b.example_id AND prev.layer = b.layer AND prev.head = b.head
        AND prev.src_word = b.src_word AND prev.dst_word = b.src_word - 1
    GROUP BY b.layer, b.head
)
SELECT h.layer + 1 AS layer, h.head + 1 AS head, vs.verb_to_subject, vs.verb_to_previous_word, vs.n_verb_subject,
       pn.pronoun_to_noun, pn.pronoun_to_previous_word, pn.n_pronouns
FROM heads h LEFT JOIN vs USING (layer, head) LEFT JOIN pn USING (layer, head)
ORDER BY layer, head
