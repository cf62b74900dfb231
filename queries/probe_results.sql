-- name: probe results
-- aliases: attention probes, probing classifiers, probes, uas, clark table 3
-- paper: Clark et al. 2019, "What Does BERT Look At?", Section 5, Table 3
-- description: Dependency parsing by probing classifiers over attention maps (UAS, percent of words,
--   punctuation not scored; each word's head picked on its own, no tree decoding). attn-only: a learned
--   weight per head and direction over the word-level maps; attn+glove: the head weights computed from
--   the GloVe vectors of the two words; distances+glove: no attention, a small network over GloVe and
--   distance features. Baselines: right-branching (each word's head is the next word, the last word is
--   the root; Clark et al.'s 26 UAS on the Penn Treebank) and left-branching (the previous word). A
--   probe on a random-init run is the paper's 'random init attn + glove'. One row per probe and
--   train/eval pair in the store: run 'atlas probe --train RUN --eval RUN' first.
-- parameters:
-- plot:

SELECT e.model,
       e.random_init,
       t.corpus AS train_corpus,
       e.corpus AS eval_corpus,
       p.probe,
       p.uas,
       p.n_words,
       p.train_uas,
       p.n_train_sentences,
       p.epochs,
       p.glove
FROM probes p
JOIN runs e ON e.run_id = p.run_id
JOIN runs t ON t.run_id = p.train_run_id
ORDER BY e.model, e.random_init, train_corpus, eval_corpus,
         list_position(['right-branching', 'left-branching', 'distances+glove', 'attn-only', 'attn+glove'], p.probe)
