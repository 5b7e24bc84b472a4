"""rollouts, rollout_stats: config canaries (a version served to a slice, compared, widened or rolled back)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06 23:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'rollouts',
        sa.Column('id', sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column('baseline', sa.Integer(), nullable=False),
        sa.Column('candidate', sa.Integer(), nullable=True),
        sa.Column('stages', sa.JSON(), nullable=False),
        sa.Column('stage', sa.Integer(), nullable=False),
        sa.Column('window_s', sa.Float(), nullable=False),
        sa.Column('thresholds', sa.JSON(), nullable=False),
        sa.Column('pods', sa.JSON(), nullable=False),
        sa.Column('state', sa.String(length=20), nullable=False),
        sa.Column('stage_since', sa.DateTime(timezone=True), nullable=True),
        sa.Column('reason', sa.String(length=500), nullable=True),
        sa.Column('reverted_to', sa.Integer(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('created_by', sa.String(length=200), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        'rollout_stats',
        sa.Column('rollout_id', sa.Integer(), sa.ForeignKey('rollouts.id'), primary_key=True),
        sa.Column('stage', sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column('pod', sa.String(length=200), primary_key=True),
        sa.Column('arm', sa.String(length=20), primary_key=True),
        sa.Column('stats', sa.JSON(), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table('rollout_stats')
    op.drop_table('rollouts')
