-- name: cls attention by feature
-- aliases: last layer cls attention, what does cls attend to, kovaleva figure 7
-- paper: Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT", Section 4.5, Figure 7
-- description: Per head of the last layer, the attention [CLS] pays to the tokens of each kind of
--   'feature attention' (the same kinds and tokens): the largest single weight of the [CLS] row over the
--   kind's tokens in an input, averaged over the inputs that have the kind (the released notebook, cell
--   53); [CLS] is its weight to itself, [SEP] the larger of the two. punctuation (pieces made only of
--   punctuation) is the project's addition, for the paper's remark that punctuation gets the largest
--   weights on STS-B, RTE and QNLI. Reads single weights, so it needs a dense run (--dense): a sparse
--   run is refused (a kind none of whose tokens kept an edge of the [CLS] row has no known maximum).
--   By role (tokens.role): the [CLS] row is the row of the input's first cls or bos token (RoBERTa's <s>,
--   Llama's BOS), [CLS] the cls or bos tokens, [SEP] the sep or eos tokens (an input without one leaves
--   sep empty, with a note). In a decoder a BOS at position 0 attends only to itself (causal attention):
--   cls is 1 and every other kind 0. A model whose inputs have no cls or bos token (GPT-2) has no [CLS]
--   row: the answer is empty, with a note saying so.
-- parameters:
--   run [run]: run id (default: the latest run)
-- needs: roles stored
-- notes: cls or bos token
--   else: there is no [CLS] row, the answer is empty
-- notes: sep or eos token
--   else: sep is empty
-- notes: no bos row
--   else: cls is 1 and every other kind 0
-- needs: SELECT count(*) FROM runs WHERE run_id = $run AND kept_mass IS NULL
--   else: run {run} is sparse: cls attention by feature reads single weights of the [CLS] row; ingest with --dense
-- plot: heatmap pronoun noun verb object subject negation cls sep punctuation
-- figure: a layer x head heat map of each of `pronoun`, `noun`, `verb`, `object`, `subject`, `negation`, `cls`, `sep`,
--   `punctuation`
-- labels:
--   cls: [CLS]
--   sep: [SEP]

WITH dense AS (
    SELECT CASE WHEN kept_mass IS NULL THEN true ELSE error('atlas: run ' || run_id
        || ' is sparse: cls attention by feature reads single weights of the [CLS] row; ingest with --dense')
    END AS ok
    FROM runs WHERE run_id = $run
),
w AS (SELECT * FROM words WHERE run_id = $run),
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
    CROSS JOIN (VALUES ('cls'), ('sep'), ('noun'), ('verb'), ('pronoun'), ('subject'), ('object'), ('negation'),
        ('punctuation')) AS k(kind)
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
        WHEN 'punctuation' THEN coalesce(t.is_punct, false)
    END
),
last AS (SELECT max(layer) AS layer FROM attn_rows WHERE run_id = $run),
cls_tok AS (  -- the input's first token of role cls or bos
    SELECT example_id, min(tok_idx) AS tok_idx FROM tokens WHERE run_id = $run AND role IN ('cls', 'bos')
    GROUP BY example_id
),
cls_row AS (  -- the last layer's [CLS] rows
    SELECT e.example_id, e.head, e.dst_tok, e.weight
    FROM attn_edges e
    JOIN cls_tok c ON c.example_id = e.example_id AND c.tok_idx = e.src_tok
    WHERE e.run_id = $run AND e.layer = (SELECT layer FROM last) AND (SELECT ok FROM dense)
),
per_input AS (
    SELECT r.head, k.kind, r.example_id, max(r.weight) AS score
    FROM cls_row r JOIN kinds k ON k.example_id = r.example_id AND k.tok_idx = r.dst_tok
    GROUP BY ALL
)
SELECT (SELECT layer FROM last) + 1 AS layer, head + 1 AS head,
       avg(score) FILTER (WHERE kind = 'pronoun') AS pronoun,
       avg(score) FILTER (WHERE kind = 'noun') AS noun,
       avg(score) FILTER (WHERE kind = 'verb') AS verb,
       avg(score) FILTER (WHERE kind = 'object') AS object,
       avg(score) FILTER (WHERE kind = 'subject') AS subject,
       avg(score) FILTER (WHERE kind = 'negation') AS negation,
       avg(score) FILTER (WHERE kind = 'cls') AS cls,
       avg(score) FILTER (WHERE kind = 'sep') AS sep,
       avg(score) FILTER (WHERE kind = 'punctuation') AS punctuation,
       count(DISTINCT example_id) AS n_inputs,
       count(*) FILTER (WHERE kind = 'negation') AS n_negation_inputs
FROM per_input
GROUP BY head
ORDER BY head
