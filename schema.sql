-- Attention Atlas store schema.
--
-- Parquet files under STORE/data/run_id=<run_id>/<table>/*.parquet are the source of truth; STORE/atlas.duckdb
-- holds one view per table below over those files (and the macros of the catalogue). Every table
-- carries run_id, so many runs live side by side: the files hold every column but run_id, which their run's
-- folder gives (a Hive partition, run_id=<run_id>; files of runs written before the partitions hold it too). Indexes are 0-based in the store (layer, head,
-- tok_idx, word_idx); queries display layers and heads 1-based ("layer-head") as the papers do.
-- The column types here are the types written to Parquet; a column NOT NULL is never NULL and is a required
-- column in the files (no validity levels to write or read). Runs written before layers and heads were SMALLINT and
-- positions in an input INTEGER hold them as TINYINT and SMALLINT; the views (and atlas.spark, Atlas.table) read
-- every file widened to the types here, so old and new runs answer alike in one store.

-- One ingest of one model over one corpus.
CREATE TABLE runs (
    run_id VARCHAR,              -- <corpus stem>__<model name>__<hash of inputs and settings>
    model VARCHAR,               -- as the user named it (hub id, path, or the embedded default)
    model_source VARCHAR,        -- the local path or hub id the weights were loaded from
    model_hash VARCHAR,          -- sha256 of the safetensors weights (of config + seed for a random init)
    random_init BOOLEAN,         -- fresh weights from the model's config (the papers' random baseline)
    seed INTEGER,                -- seed of the random init
    n_layers SMALLINT,
    n_heads SMALLINT,
    n_kv_heads SMALLINT,         -- key/value heads (grouped-query attention: fewer than n_heads); NULL in runs made
                                 --   before the column: read it as n_heads
    corpus VARCHAR,              -- corpus file name
    corpus_sha256 VARCHAR,
    pack VARCHAR,                -- none | pair | window: how sentences were grouped into inputs
    text VARCHAR,                -- written: each sentence as written (CoNLL-U '# text', GLUE and text files' raw
                                 --   strings), the words placed on its characters | words: the words joined by
                                 --   single spaces (Clark et al.'s input; every run made before the setting)
    word_rows VARCHAR,           -- mean: FROM a word of several pieces, the mean of their rows | first: its first
                                 --   piece's row (the released code's default)
    dtype VARCHAR,               -- the weights' dtype: float32 (every run made before the setting) | bfloat16 |
                                 --   float16; the attention softmax and every statistic are float32 in each
    config VARCHAR,              -- --random-init --config: the overrides of the model's config, as JSON; NULL: none
    max_length INTEGER,          -- longest input in word pieces; longer sentences are skipped, never truncated
                                 --   (--format text: a longer paragraph pair is cut, see examples.sent_ids)
    kept_mass DOUBLE,            -- sparsity target per attention row; NULL = dense (every weight kept)
    max_edges INTEGER,           -- at most this many edges per attention row beside kept_mass; NULL: no cap
    value_norms BOOLEAN,         -- attn_rows holds the norm-based columns (--norms); false in every run made before
    rollout VARCHAR,             -- none | cls | last | all: the rows of the attention rollout in table rollout
                                 --   (--rollout); none in every run made before
    weight_precision VARCHAR,    -- float32: everything exact (dense); 1/256: edge and word-level weights are
                                 --   multiples of 1/256 (error at most 1/512), the masses attn_rows.to_* multiples
                                 --   of 1/2048 (error at most 1/4096), attn_rows.received at float16 precision
                                 --   (relative error at most 2**-11), attn_rows.entropy to 17 significant bits
                                 --   (relative error at most 2**-17)
    n_sentences INTEGER,
    n_examples INTEGER,          -- inputs run through the model
    n_skipped INTEGER,           -- sentences skipped because they exceed max_length
    n_tokens BIGINT,
    n_edges BIGINT,              -- rows in attn_edges
    created_at TIMESTAMP,
    atlas_version VARCHAR,
    transformers_version VARCHAR,
    torch_version VARCHAR
);

-- One model input sequence: one text or a pair, with the special tokens the tokenizer's own template adds
-- (BERT: [CLS] a [SEP] (b [SEP]); RoBERTa: <s> a </s>(</s> b </s>); GPT-2: none; Llama: <s> a).
CREATE TABLE examples (
    run_id VARCHAR,
    example_id INTEGER,          -- 0-based, in corpus order (text with --sample: in the order drawn)
    doc_id VARCHAR,              -- from '# newdoc id', NULL when the corpus has none (text: the article title)
    sent_ids VARCHAR[],          -- '# sent_id' of each sentence in the input (text: the paragraph's LINE, or
                                 --   LINE:FIRST-LAST/N when only its words FIRST to LAST of N were kept)
    first_line INTEGER,          -- corpus line of the first word
    n_sentences INTEGER,
    n_tokens INTEGER,            -- word pieces including the special tokens
    n_words INTEGER,
    skipped BOOLEAN,             -- true: longer than max_length, not run (no tokens, words or attention)
    label VARCHAR,               -- task label or score of a GLUE example (--format glue), NULL for a treebank
    -- a needle probe's input (--format needle; NULL for every other format): Wu et al.'s needle in a haystack
    context_length INTEGER,      -- the --lengths it was built for: prompt + continuation at most this many pieces
    depth_percent INTEGER,       -- the --depths it was built for: where the needle went in the context, in percent
    needle_start INTEGER,        -- tok_idx of the answer's span in the prompt, [needle_start, needle_end), as their
    needle_end INTEGER,          --   find_needle_idx finds it (NULL: not found)
    generated_start INTEGER,     -- tok_idx of the first token of the model's greedy continuation (the prompt ends before)
    n_generated INTEGER,         -- tokens of the continuation (at most 50, the last a newline where one came)
    needle_recall DOUBLE         -- ROUGE-1 recall of the answer by the continuation, x 100 (their filter: > 50)
);

-- One word piece or special token of an input.
CREATE TABLE tokens (
    run_id VARCHAR,
    example_id INTEGER,
    tok_idx INTEGER,             -- position in the input
    piece VARCHAR,               -- the tokenizer's piece, e.g. 'play', '##ing', 'Ġplay', '▁play', '[CLS]'
    piece_id INTEGER,            -- vocabulary id
    word_idx INTEGER,            -- word of the input this piece belongs to (from the tokenizer's offsets: the
                                 --   word holding its first character, spaces aside; runs.text 'words': the word
                                 --   whose characters it covers); NULL for a special token
    special VARCHAR,             -- a special token added by the tokenizer's template, as its literal string
                                 --   ('[CLS]', '<s>', '</s>', '<|begin_of_text|>'); NULL for a word's piece
    role VARCHAR,                -- what the special token is for, from the tokenizer's special-token attributes
                                 --   (never its string): cls | bos | sep | eos | pad | other; NULL for a
                                 --   word's piece. A token named both cls and bos (<s>) is cls in an encoder,
                                 --   bos in a decoder (causal LM); both sep and eos (</s>): sep, resp. eos
    segment TINYINT,             -- text of the input (0 = first, 1 = second of a pair): the token type id where the
                                 --   template tells the two texts apart by it (BERT: [CLS] a [SEP] 0, b [SEP] 1;
                                 --   Llama: <s> a 0, <s> b 1), else 0 up to the first text's end and the special
                                 --   tokens right after it (RoBERTa: <s> a </s></s> 0, b </s> 1)
    is_punct BOOLEAN,            -- the corpus characters of the piece (spaces aside) are all punctuation
    dot_comma BOOLEAN            -- a word's piece whose corpus characters (spaces aside) are '.' or ',': the keys
                                 --   of attn_rows.to_dot_comma; NULL in runs made before the column
);

-- One corpus word (syntactic word of CoNLL-U; multiword-token ranges and empty nodes are not words).
CREATE TABLE words (
    run_id VARCHAR,
    example_id INTEGER,
    word_idx INTEGER,            -- 0-based position among the input's words
    sent_id VARCHAR,
    conllu_id INTEGER,           -- the CoNLL-U ID column (1-based in its sentence)
    line INTEGER,                -- corpus line
    form VARCHAR,
    lemma VARCHAR,
    upos VARCHAR,
    xpos VARCHAR,
    feats VARCHAR,
    head_word_idx INTEGER,       -- word_idx of the syntactic head in the same input; NULL for the root
    deprel VARCHAR,              -- UD relation with subtype, e.g. 'nsubj', 'nmod:poss'
    first_tok INTEGER,           -- tok_idx of the word's first piece; NULL for a word without pieces (text as
                                 --   written: "not" of "cannot" when the tokenizer makes "cannot" one piece)
    n_toks INTEGER               -- number of pieces (0: none of its own)
);

-- One coreference mention (CorefUD 'Entity=' brackets), both ends inside one input.
CREATE TABLE mentions (
    run_id VARCHAR,
    example_id INTEGER,
    mention_id INTEGER,          -- 0-based within the input, in order of the first word
    doc_id VARCHAR,
    entity_id VARCHAR,
    first_word INTEGER,          -- word_idx span, inclusive
    last_word INTEGER,
    head_word INTEGER,           -- the span's word whose syntactic head lies outside the span
    mention_type VARCHAR         -- pronoun (head UPOS PRON) | proper (PROPN) | nominal (anything else)
);

-- One frame element of a FrameNet exemplar sentence (--format framenet), with the frame's target.
CREATE TABLE frames (
    run_id VARCHAR,
    example_id INTEGER,
    frame VARCHAR,               -- e.g. 'Body_movement'
    lexical_unit VARCHAR,        -- e.g. 'throw.v'
    element VARCHAR,             -- frame element, e.g. 'Agent'
    core BOOLEAN,                -- in one of the frame's core sets (<FEcoreSet> in frame/<frame>.xml)
    target_first INTEGER,        -- word_idx span of the frame-evoking target, inclusive
    target_last INTEGER,
    element_first INTEGER,       -- word_idx span of the element, inclusive
    element_last INTEGER
);

-- One kept attention weight. Sparse: per row the largest weights (as stored; ties: the earlier token) until
-- their stored mass reaches runs.kept_mass, at most runs.max_edges of them, none that rounds to 0, the argmax
-- always. A row's kept mass, number of edges and largest weight are the sum, count and max of its edges.
CREATE TABLE attn_edges (
    run_id VARCHAR NOT NULL,
    example_id INTEGER NOT NULL,
    layer SMALLINT NOT NULL,     -- 0-based
    head SMALLINT NOT NULL,      -- 0-based
    src_tok INTEGER NOT NULL,    -- the attending token (query)
    dst_tok INTEGER NOT NULL,    -- the attended token (key)
    weight FLOAT NOT NULL        -- at runs.weight_precision
);

-- One attention row, with statistics computed from the dense row before sparsifying (entropy and argmax
-- exact; weights and masses at runs.weight_precision), so analyses of whole rows need no edges.
CREATE TABLE attn_rows (
    run_id VARCHAR NOT NULL,
    example_id INTEGER NOT NULL,
    layer SMALLINT NOT NULL,
    head SMALLINT NOT NULL,
    src_tok INTEGER NOT NULL,
    entropy FLOAT NOT NULL,      -- nats, of the smoothed row 0.9999 a + 1e-4 / n (Clark et al.'s released code;
                                 --   at most about 0.002 nats above the exact entropy)
    argmax_tok INTEGER NOT NULL,  -- the first token of largest weight (always an edge; its weight: the row's max)
    -- attention mass the row gives to (from the dense row; at runs.weight_precision):
    to_self FLOAT NOT NULL,      -- the token itself
    to_prev FLOAT NOT NULL,      -- the previous token (0 for the first)
    to_next FLOAT NOT NULL,      -- the next token (0 for the last)
    to_cls FLOAT NOT NULL,       -- the input's special tokens of role cls or bos ([CLS], <s>, <|begin_of_text|>);
                                 --   0 in an input without one (GPT-2)
    to_first FLOAT,              -- the input's first token (position 0, whatever it is: [CLS], a BOS or a word
                                 --   piece; the attention sink of Xiao et al. 2023). In the Parquet files NULL
                                 --   where position 0 is the input's only cls/bos token (then equal to to_cls,
                                 --   which the view gives)
    to_sep FLOAT NOT NULL,       -- every special token of role sep or eos ([SEP], </s>); 0 in an input without
                                 --   one (a decoder's)
    to_dot_comma FLOAT NOT NULL, -- the pieces whose corpus characters are '.' or ',' (spaces aside)
    received FLOAT NOT NULL,     -- attention the token src_tok receives: the column sum of the dense map over
                                 --   every row of the input (Kovaleva et al.'s feature attention)
    value_norm FLOAT             -- runs ingested with --norms (runs.value_norms), else NULL: ||f(x_src_tok)||, the norm
                                 --   of what this head passes on from the row's token (Kobayashi et al. 2020): its
                                 --   value vector (with the value bias) through the head's slice of the attention's
                                 --   output projection (without the output bias). What the head passes from token j
                                 --   to token i has norm weight * ||f(x_j)||: an edge's is its weight times its
                                 --   dst_tok's value_norm. float32 on a dense run; 11 significant bits on a sparse one
                                 --   (float16's precision: relative error at most 2**-11)
);

-- Per input, layer and head, in runs ingested with --norms: sums over the input's attention rows (every token's) of
-- what each row draws through the head in norm (Kobayashi et al. 2020): sum_j weight_ij * ||f(x_j)|| over the keys
-- of a kind (attn_rows.value_norm), and each row's share of its whole. The mean over an input's rows is the sum over
-- its n_tokens (examples). float32 from float64 sums of the dense rows, on every run.
CREATE TABLE head_norms (
    run_id VARCHAR NOT NULL,
    example_id INTEGER NOT NULL,
    layer SMALLINT NOT NULL,
    head SMALLINT NOT NULL,
    norm_cls FLOAT NOT NULL,       -- to the special tokens of role cls or bos (as attn_rows.to_cls)
    norm_sep FLOAT NOT NULL,       -- to the special tokens of role sep or eos (as attn_rows.to_sep)
    norm_dot_comma FLOAT NOT NULL, -- to the pieces '.' and ',' (as attn_rows.to_dot_comma)
    norm_total FLOAT NOT NULL,     -- to every token
    share_cls FLOAT NOT NULL,      -- sum over the rows of norm to cls / the row's norm to every token
    share_sep FLOAT NOT NULL,
    share_dot_comma FLOAT NOT NULL
);

-- The attention rollout (Abnar & Zuidema 2020), in runs ingested with --rollout (runs.rollout): row src_tok of the
-- joint attention through layers 0 to layer (each layer's heads averaged, (A + I) with rows renormalised, joint_i =
-- aug_i joint_(i-1), their released compute_joint_attention). rollout 'cls' and 'last': one row per input and layer,
-- the input's first cls/bos token's or its last token's, every input token kept (float32; an input without a
-- cls/bos token has no 'cls' row); 'all': every token's row, kept as the edges are (runs.kept_mass, max_edges,
-- weight_precision). An input read in blocks of rows (too long for its whole maps) has none.
CREATE TABLE rollout (
    run_id VARCHAR NOT NULL,
    example_id INTEGER NOT NULL,
    layer SMALLINT NOT NULL,     -- the rollout through layers 0 to this one
    src_tok INTEGER NOT NULL,    -- the token whose row it is
    dst_tok INTEGER NOT NULL,    -- the input token it draws on
    weight FLOAT NOT NULL        -- its share of the row (a row sums to 1, on a dense run)
);

-- The attention-distance profile: per input, layer and head, the share of the attention of the input's rows (the
-- mean over every token's row) by query-key distance |src_tok - dst_tok| in powers of two, from the dense maps at
-- ingest (for every input, whole or read by rows): (n - 1).bit_length() + 1 rows for an input of n tokens (14 for
-- 4,097). The masses of an input's head sum to 1. float32 on a dense run (from float64 sums); on a sparse run the
-- masses and sinks are multiples of 2^-11 (as attn_rows' masses) and distance keeps 11 significant bits.
CREATE TABLE attn_distance (
    run_id VARCHAR NOT NULL,
    example_id INTEGER NOT NULL,
    layer SMALLINT NOT NULL,
    head SMALLINT NOT NULL,
    bucket TINYINT NOT NULL,     -- 0: distance 0 (the token itself); b >= 1: distances 2^(b-1) to 2^b - 1 (1, 2-3, 4-7, ...)
    mass FLOAT NOT NULL,         -- mean over the rows of their weight at those distances
    distance FLOAT NOT NULL,     -- mean over the rows of weight * distance at those distances (summed: the mean distance)
    sink_1 FLOAT NOT NULL,       -- the part of mass to the input's first token (position 0: a BOS, a [CLS])
    sink_4 FLOAT NOT NULL        -- ... to its first 4 tokens (StreamingLLM's attention sinks)
);

-- One word-level attention row (Clark et al.: TO a split word = sum over its pieces, FROM = mean over
-- its pieces, or its first piece's row where runs.word_rows is 'first', [CLS]/[SEP] as units of their own): the
-- other real word the word attends to most, and the other real word attending to it most (the transposed map,
-- Clark et al.'s head -> dependent predictor). Computed from the dense map, so the predictions are exact whatever
-- the edge sparsity. A word without pieces (words.n_toks 0) has no row and is never predicted; an input with
-- fewer than two words with pieces has none.
CREATE TABLE word_rows (
    run_id VARCHAR NOT NULL,
    example_id INTEGER NOT NULL,
    layer SMALLINT NOT NULL,
    head SMALLINT NOT NULL,
    src_word INTEGER NOT NULL,   -- the attending word
    dst_word INTEGER NOT NULL,   -- most-attended word other than itself, [CLS] and [SEP]
    weight FLOAT NOT NULL,       -- its word-level attention weight (at runs.weight_precision)
    from_word INTEGER NOT NULL,  -- the other real word whose word-level attention TO src_word is largest
    from_weight FLOAT NOT NULL   -- that attention weight (at runs.weight_precision)
);

-- One pair of heads: Jensen-Shannon divergence between their attention distributions, averaged over
-- the token rows of the run's first inputs (written by 'atlas distances', from recomputed dense maps).
CREATE TABLE head_pairs (
    run_id VARCHAR,
    layer_a SMALLINT,
    head_a SMALLINT,
    layer_b SMALLINT,
    head_b SMALLINT,
    js DOUBLE,                   -- nats; 0 on the diagonal, symmetric
    n_rows BIGINT                -- attention rows averaged over
);

-- One per-head scalar computed in Python from the store (written back with the run it came from).
CREATE TABLE head_scores (
    run_id VARCHAR,
    analysis VARCHAR,            -- e.g. 'head distances'
    layer SMALLINT,
    head SMALLINT,
    metric VARCHAR,              -- e.g. 'mds_x', 'mds_y', 'cluster'
    value DOUBLE
);

-- One attention probe or parser baseline scored on an eval run (written by 'atlas probe'; Clark et al.
-- Section 5). Probes are trained on train_run_id's sentences with that run's model, from recomputed
-- dense word-level maps, and scored on run_id's sentences by UAS (punctuation not scored).
CREATE TABLE probes (
    run_id VARCHAR,              -- the eval run
    train_run_id VARCHAR,        -- the run the probe was trained on
    probe VARCHAR,               -- attn-only | attn+glove | distances+glove | right-branching | left-branching
    uas DOUBLE,                  -- percent of scored words whose predicted head is the gold head
    n_correct INTEGER,
    n_words INTEGER,             -- scored words of the eval run (every word but punct)
    train_uas DOUBLE,            -- the same on the training sentences
    n_train_sentences INTEGER,
    epochs SMALLINT,
    seed INTEGER,
    glove VARCHAR                -- word vectors used, NULL when none
);

-- One dev-set evaluation of a task model (written by 'atlas finetune'): the rows of Kovaleva et al.
-- Table 1 (pre-trained without fine-tuning, random init + fine-tuning, pre-trained + fine-tuning).
CREATE TABLE task_models (
    run_id VARCHAR,              -- <task>__<checkpoint folder>__<hash of its weights>
    task VARCHAR,                -- SST-2, MRPC, RTE, STS-B, QQP, QNLI, MNLI
    model VARCHAR,               -- the encoder it was made from (hub id, path, or the embedded default)
    init VARCHAR,                -- pretrained | random (fresh weights from the config, seeded)
    epochs SMALLINT,             -- 0: not fine-tuned (the task head keeps its seeded initial weights)
    n_train INTEGER,             -- training examples used (the first N after a seeded shuffle)
    learning_rate DOUBLE,
    seed INTEGER,
    checkpoint VARCHAR,          -- folder the model was saved to (safetensors, config, tokenizer)
    n_examples INTEGER,          -- dev examples evaluated
    metric VARCHAR,              -- accuracy | f1 | pearson | spearman, in percent
    value DOUBLE,
    primary_metric VARCHAR,      -- the task's headline metric (accuracy; f1 for MRPC/QQP; pearson for STS-B)
    created_at TIMESTAMP
);

-- One dev-set evaluation of a task model with heads disabled or masked ('atlas ablate', 'atlas importance').
CREATE TABLE ablations (
    run_id VARCHAR,              -- the task model's run id (see task_models)
    task VARCHAR,
    method VARCHAR,              -- uniform: attention 1/L over the real tokens (Kovaleva et al.) |
                                 --   mask: the head's output times 0 (Michel et al.)
    kind VARCHAR,                -- head | layer | pruned | all_but_one
    layer SMALLINT,              -- head/layer: what was disabled; all_but_one: the layer, and the kept head
    head SMALLINT,
    pruned_share DOUBLE,         -- pruned: share of all heads masked, least important first
    n_examples INTEGER,
    metric VARCHAR,
    value DOUBLE,
    primary_metric VARCHAR,      -- the task's headline metric
    baseline DOUBLE,             -- the same metric with nothing disabled
    delta DOUBLE                 -- value - baseline
);

-- Gradient importance of attention (Clark et al. Figure 5), written by 'atlas grads': per layer, the
-- mean over heads and (query, key) pairs of real tokens of |d loss / d attention weight| by key kind.
CREATE TABLE attention_gradients (
    run_id VARCHAR,              -- the task model's run id, or grads__<corpus>__<model>__<hash> for MLM
    loss VARCHAR,                -- mlm | task:<TASK> (the fine-tuned task loss on its dev data)
    layer SMALLINT,
    target VARCHAR,              -- sep: [SEP] | dot_comma: '.' and ',' | other
    mean_abs_grad DOUBLE,
    n_weights BIGINT             -- attention weights averaged over
);

-- One (input, head) attention map classed into Kovaleva et al.'s patterns (written by 'atlas patterns').
CREATE TABLE patterns (
    run_id VARCHAR,
    example_id INTEGER,
    layer SMALLINT,
    head SMALLINT,
    vertical DOUBLE,             -- mean over rows of attention to [CLS] and [SEP]
    diagonal DOUBLE,             -- mean over rows of attention to the previous and next token
    block DOUBLE,                -- pair inputs: mean over word-piece rows of attention inside the own segment
    pattern VARCHAR,             -- Vertical | Diagonal | Vertical+Diagonal | Block | Heterogeneous
    method VARCHAR               -- rule (the thresholds of atlas/patterns.py) | cnn (trained on --labels)
);
