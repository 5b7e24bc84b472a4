"""config database: teams, keys, aliases, deployments, prices, budgets, policies, admin tokens, audit

Revision ID: 0001
Revises: 
Create Date: 2026-11-29 14:45:03.052151
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('admin_tokens',
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('role', sa.String(length=20), nullable=False),
    sa.Column('hash', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('name'),
    sa.UniqueConstraint('hash')
    )
    op.create_table('aliases',
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('audit_log',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('actor', sa.String(length=200), nullable=False),
    sa.Column('action', sa.String(length=100), nullable=False),
    sa.Column('object', sa.String(length=300), nullable=False),
    sa.Column('outcome', sa.String(length=20), nullable=False),
    sa.Column('before', sa.JSON(), nullable=True),
    sa.Column('after', sa.JSON(), nullable=True),
    sa.Column('snapshot_version', sa.Integer(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('budgets',
    sa.Column('scope', sa.String(length=300), nullable=False),
    sa.Column('monthly_limit', sa.String(length=40), nullable=True),
    sa.Column('soft_pct', sa.Integer(), nullable=False),
    sa.Column('downgrade_alias', sa.String(length=200), nullable=True),
    sa.Column('max_calls', sa.Integer(), nullable=True),
    sa.Column('env', sa.String(length=8), nullable=False),
    sa.PrimaryKeyConstraint('scope')
    )
    op.create_table('business_units',
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('config_head',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('deployments',
    sa.Column('id', sa.String(length=200), nullable=False),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('fx_rates',
    sa.Column('from_ccy', sa.String(length=3), nullable=False),
    sa.Column('to_ccy', sa.String(length=3), nullable=False),
    sa.Column('month', sa.String(length=7), nullable=False),
    sa.Column('rate', sa.String(length=40), nullable=False),
    sa.PrimaryKeyConstraint('from_ccy', 'to_ccy', 'month')
    )
    op.create_table('keys',
    sa.Column('id', sa.String(length=100), nullable=False),
    sa.Column('hash', sa.String(length=64), nullable=False),
    sa.Column('team', sa.String(length=200), nullable=False),
    sa.Column('app', sa.String(length=200), nullable=False),
    sa.Column('env', sa.String(length=8), nullable=False),
    sa.Column('aliases', sa.JSON(), nullable=False),
    sa.Column('data_class_ceiling', sa.String(length=20), nullable=False),
    sa.Column('default_data_class', sa.String(length=20), nullable=False),
    sa.Column('rpm', sa.Integer(), nullable=True),
    sa.Column('input_tpm', sa.Integer(), nullable=True),
    sa.Column('output_tpm', sa.Integer(), nullable=True),
    sa.Column('expires_at', sa.Float(), nullable=True),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('created_by', sa.String(length=200), nullable=False),
    sa.Column('rotated_from', sa.String(length=100), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('hash')
    )
    op.create_table('policies',
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('price_versions',
    sa.Column('version', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('valid_from', sa.DateTime(timezone=True), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('created_by', sa.String(length=200), nullable=False),
    sa.PrimaryKeyConstraint('version')
    )
    op.create_table('snapshots',
    sa.Column('version', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.Column('document', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('actor', sa.String(length=200), nullable=False),
    sa.PrimaryKeyConstraint('version')
    )
    op.create_table('state_imports',
    sa.Column('source', sa.String(length=100), nullable=False),
    sa.Column('offset', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('source')
    )
    op.create_table('prices',
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('deployment', sa.String(length=200), nullable=False),
    sa.Column('currency', sa.String(length=3), nullable=False),
    sa.Column('input', sa.String(length=40), nullable=False),
    sa.Column('output', sa.String(length=40), nullable=False),
    sa.Column('cached_input', sa.String(length=40), nullable=True),
    sa.Column('cache_write', sa.String(length=40), nullable=True),
    sa.Column('reasoning', sa.String(length=40), nullable=True),
    sa.ForeignKeyConstraint(['version'], ['price_versions.version'], ),
    sa.PrimaryKeyConstraint('version', 'deployment')
    )
    op.create_table('teams',
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('business_unit', sa.String(length=200), nullable=True),
    sa.ForeignKeyConstraint(['business_unit'], ['business_units.name'], ),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('apps',
    sa.Column('team', sa.String(length=200), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.ForeignKeyConstraint(['team'], ['teams.name'], ),
    sa.PrimaryKeyConstraint('team', 'name')
    )


def downgrade() -> None:
    op.drop_table('apps')
    op.drop_table('teams')
    op.drop_table('prices')
    op.drop_table('state_imports')
    op.drop_table('snapshots')
    op.drop_table('price_versions')
    op.drop_table('policies')
    op.drop_table('keys')
    op.drop_table('fx_rates')
    op.drop_table('deployments')
    op.drop_table('config_head')
    op.drop_table('business_units')
    op.drop_table('budgets')
    op.drop_table('audit_log')
    op.drop_table('aliases')
    op.drop_table('admin_tokens')
