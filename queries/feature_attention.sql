-- name: feature attention
-- aliases: attention to linguistic features, vertical stripes, attention to nouns verbs negation, kovaleva figure 6
-- paper: Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT", Section 4.4, Figure 6
-- description: Per head, the attention a token of a kind receives: the sum of the weights it gets from
--   every token of the input ([CLS] and [SEP] rows included), divided by the input length; the maximum
--   over the kind's tokens in an input; the mean over the inputs (the released notebook, cells 12-13 and
--   33-47). As in the notebook an input without the kind scores 0 and is averaged in, except for
--   negation, where inputs without a negation word are left out (cell 39; the paper's text leaves out
--   every input without the kind). Kinds by the notebook's sets (cells 9-11) over the stored annotation
--   (for GLUE runs spaCy's Penn Treebank tags in words.xpos and its relations in words.deprel; UD
--   relation subtypes are dropped and UD's obj counts as dobj): noun NN NNS NNP NNPS; verb VB VBD VBG VBN
--   VBP VBZ; pronoun PRP PRP$; subject nsubj nsubjpass csubj csubjpass agent expl; object dobj iobj
--   dative attr oprd; negation the paper's list (neither, nor, not, never, none, don't, won't, didn't,
--   hadn't, haven't, can't, isn't, wasn't, shouldn't, couldn't, nothing, nowhere; any case; a contraction
--   is the two words the parser splits it into, "do" "n't"); [CLS]; [SEP] (the larger of the two). A
--   kind's tokens are the pieces of its words, by position. Exact whatever the sparsity: it reads the
--   dense column sums (attn_rows.received, at float16 precision in sparse runs). [CLS] and [SEP] are the
--   input's special tokens by role (tokens.role): cls or bos (RoBERTa's <s>, Llama's BOS), sep or eos
--   (</s>); a model whose inputs have none (GPT-2 has no special token, a decoder no sep) scores 0 there,
--   as an input without a kind does. In a decoder a token is attended only by itself and the tokens
--   after it (causal attention): its received attention sums over those rows alone, so early tokens, a
--   BOS above all, are attended by more rows than late ones.
-- parameters:
--   run [run]: run id (default: the latest run)
-- needs: roles stored
-- notes: dependency relations
--   else: noun, verb, pronoun, subject and object score 0
-- plot: heatmap cls sep noun verb pronoun subject object negation
-- figure: a layer x head heat map of each of `cls`, `sep`, `noun`, `verb`, `pronoun`, `subject`, `object`, `negation`
-- labels:
--   cls: [CLS]
--   sep: [SEP]

WITH w AS (SELECT * FROM words WHERE run_id = $run),
negation AS (  -- the listed words, and both words of a listed contraction
    SELECT example_id, word_idx FROM w
    WHERE lower(form) IN ('neither', 'nor', 'not', 'never', 'none', 'nothing', 'nowhere')
    UNION
    SELECT n.example_id, unnest([p.word_idx, n.word_idx]) FROM w n
    JOIN w p ON p.example_id = n.example_id AND p.word_idx = n.word_idx - 1 AND p.sent_id = n.sent_id
    WHERE lower(n.form) = 'n''t'
      AND lower(p.form) IN ('do', 'wo', 'did', 'had', 'have', 'ca', 'is', 'was', 'should', 'could')
),
kinds AS (
    SELECT t.example_id, t.tok_idx, k.kind
    FROM tokens t
    LEFT JOIN w ON w.example_id = t.example_id AND w.word_idx = t.word_idx
    LEFT JOIN negation n ON n.example_id = t.example_id AND n.word_idx = t.word_idx
    CROSS JOIN (VALUES ('cls'), ('sep'), ('noun'), ('verb'), ('pronoun'), ('subject'), ('object'), ('negation'))
        AS k(kind)
    WHERE t.run_id = $run AND CASE k.kind
        WHEN 'cls' THEN t.role IN ('cls', 'bos')
        WHEN 'sep' THEN t.role IN ('sep', 'eos')
        WHEN 'noun' THEN w.xpos IN ('NN', 'NNS', 'NNP', 'NNPS')
        WHEN 'verb' THEN w.xpos IN ('VB', 'VBD', 'VBG', 'VBN', 'VBP', 'VBZ')
        WHEN 'pronoun' THEN w.xpos IN ('PRP', 'PRP$')
        WHEN 'subject' THEN split_part(w.deprel, ':', 1)
            IN ('nsubj', 'nsubjpass', 'csubj', 'csubjpass', 'agent', 'expl')
        WHEN 'object' THEN split_part(w.deprel, ':', 1) IN ('dobj', 'obj', 'iobj', 'dative', 'attr', 'oprd')
        WHEN 'negation' THEN n.word_idx IS NOT NULL
    END
),
inputs AS (SELECT example_id, n_tokens FROM examples WHERE run_id = $run AND NOT skipped),
per_input AS (  -- per input, head and kind: the largest received attention / length over the kind's tokens
    SELECT r.layer, r.head, k.kind, r.example_id, max(r.received::DOUBLE / x.n_tokens) AS score
    FROM attn_rows r
    JOIN kinds k ON k.example_id = r.example_id AND k.tok_idx = r.src_tok
    JOIN inputs x ON x.example_id = r.example_id
    WHERE r.run_id = $run
    GROUP BY ALL
),
heads AS (SELECT DISTINCT layer, head FROM attn_rows WHERE run_id = $run),
n AS (SELECT count(*) AS n_inputs FROM inputs)
SELECT h.layer + 1 AS layer, h.head + 1 AS head,
       coalesce(sum(p.score) FILTER (WHERE p.kind = 'cls'), 0) / any_value(n.n_inputs) AS cls,
       coalesce(sum(p.score) FILTER (WHERE p.kind = 'sep'), 0) / any_value(n.n_inputs) AS sep,
       coalesce(sum(p.score) FILTER (WHERE p.kind = 'noun'), 0) / any_value(n.n_inputs) AS noun,
       coalesce(sum(p.score) FILTER (WHERE p.kind = 'verb'), 0) / any_value(n.n_inputs) AS verb,
       coalesce(sum(p.score) FILTER (WHERE p.kind = 'pronoun'), 0) / any_value(n.n_inputs) AS pronoun,
       coalesce(sum(p.score) FILTER (WHERE p.kind = 'subject'), 0) / any_value(n.n_inputs) AS subject,
       coalesce(sum(p.score) FILTER (WHERE p.kind = 'object'), 0) / any_value(n.n_inputs) AS object,
       avg(p.score) FILTER (WHERE p.kind = 'negation') AS negation,
       count(p.example_id) FILTER (WHERE p.kind = 'negation') AS n_negation_inputs,
       any_value(n.n_inputs) AS n_inputs
FROM heads h CROSS JOIN n LEFT JOIN per_input p ON p.layer = h.layer AND p.head = h.head
GROUP BY h.layer, h.head
ORDER BY h.layer, h.head
